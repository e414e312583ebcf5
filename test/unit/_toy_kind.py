"""A toy launch kind, to show what adding a kind takes: its table, its kernel (stage calls on the shared
hand-off), and one registry line (`test_kind_table.py` adds it). Everything else (argument names, sync
layout, scratch, static checks, compiling, the interpreter's task counts) comes from the engine.

  scale [R tasks]:  t[r] = x[r] * w
  mix   [R tasks]:  y[r] = t[r] + t[(r + 1) % R]   (reads a row another task wrote: the hand-off matters)
  total [1 task]:   s[0] = sum of y, by the last of the R "mix" tasks to land (a last-arrival count)
"""

import dataclasses

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import count_task, hand_off, last_to_land, launch_end, launch_start, live_tasks
from sgl_amd_mono.common.kind import Buffer, Count, KindTable, StageDef

TABLE = KindTable(
    name="toy",
    inputs=(Buffer("x", lambda d: (d.R, d.D), "f32"),),
    weights=(Buffer("w", lambda d: (d.D,), "f32"),),
    outputs=(Buffer("y", lambda d: (d.R, d.D), "f32"), Buffer("s", lambda d: (1,), "f32")),
    scratch=(Buffer("t", lambda d: (d.R, d.D), "f32"),),
    stages=(
        StageDef("scale", lambda d: d.R, ("x", "w"), ("t",)),
        StageDef("mix", lambda d: d.R, ("t", "y"), ("y", "s"), counts=(Count("mix_cnt", lambda d: 1, lambda d: d.R),)),
    ),
)


@dataclasses.dataclass(frozen=True)
class ToyTiles:
    progs_per_sm: int = 1
    num_warps: int = 4

    def resolve(self, geo, *, tp, width, n_programs, kind):  # kind: the table's name (its tile defaults)
        return self

    def compile_options(self):
        return {}


@dataclasses.dataclass(frozen=True)
class ToyDims:
    R: int
    D: int
    tiles: ToyTiles


@triton.jit
def scale(x_ptr, w_ptr, t_ptr, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr, D: tl.constexpr,
          NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    c = tl.arange(0, D)
    for r in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG):
        count_task(task_count_ptr, S, COUNT_TASKS)
        tl.store(t_ptr + r * D + c, tl.load(x_ptr + r * D + c) * tl.load(w_ptr + c))


@triton.jit
def mix(t_ptr, y_ptr, s_ptr, mix_cnt_ptr, epoch, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr,
        R: tl.constexpr, D: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    c = tl.arange(0, D)
    for r in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG):
        count_task(task_count_ptr, S, COUNT_TASKS)
        y = tl.load(t_ptr + r * D + c, cache_modifier=".cg") + tl.load(t_ptr + ((r + 1) % R) * D + c, cache_modifier=".cg")
        tl.store(y_ptr + r * D + c, y)
        if last_to_land(mix_cnt_ptr, epoch, R):
            rows = tl.arange(0, R)
            tl.store(s_ptr, tl.sum(tl.sum(tl.load(y_ptr + rows[:, None] * D + c[None, :], cache_modifier=".cg"), 1), 0))


@triton.jit(do_not_specialize=["launch_id"])
def toy_kernel(x_ptr, w_ptr, y_ptr, s_ptr, t_ptr, sync_ptr, err_ptr, trace_ptr, task_count_ptr, launch_id, bound,
               R: tl.constexpr, D: tl.constexpr, NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr,
               SKIP_MASK: tl.constexpr, TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr, C_MIX_CNT: tl.constexpr,
               N_STAGES: tl.constexpr, S_SCALE: tl.constexpr, S_MIX: tl.constexpr, T_SCALE: tl.constexpr,
               T_MIX: tl.constexpr):
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, TRACE)
    scale(x_ptr, w_ptr, t_ptr, pid, ok, task_count_ptr, S_SCALE, T_SCALE, D, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SCALE, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)
    mix(t_ptr, y_ptr, s_ptr, sync_ptr + C_MIX_CNT, epoch, pid, ok, task_count_ptr, S_MIX, T_MIX, R, D, NPROG,
        SKIP_MASK, COUNT_TASKS)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(
    table=TABLE, kernel=toy_kernel,
    dims=lambda geo, *, tp, width, tiles, n_programs, kv_dtype, options: ToyDims(R=width, D=geo["D"], tiles=tiles),
    constexprs=lambda d: {"R": d.R, "D": d.D}, scalars=lambda d: {},
    refusals=lambda geo, *, tp, width, kv_dtype: [] if width & (width - 1) == 0 else [f"width {width} is not a power of two"])


def reference(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = x * w
    y = t + t.roll(-1, 0)
    return y, y.sum().reshape(1)
