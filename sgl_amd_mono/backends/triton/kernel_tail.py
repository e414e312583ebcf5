"""The "tail" kind in Triton: the step's last launch (`glm53/kinds/tail.py` is the table): the final RMSNorm of
the last layer's output and residual, then this rank's bf16 LM head, as stage calls on the shared hand-off.
Arguments come by name from the table (`launch.py`), as every kind's."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_tail as tail
from sgl_amd_mono.backends.triton.exchange import gather_stage
from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import hand_off, launch_end, launch_start
from sgl_amd_mono.glm53.kinds import tail as tail_kind
from sgl_amd_mono.glm53.kinds.dims import LayerDims, layer_dims, pow2


def constexprs(d: LayerDims) -> dict:
    """R rows, D hidden, V this rank's vocab rows; BNV LM-head rows a task, STAGES its k loop's pipeline depth,
    NORM_GP a hidden row's 128-groups padded to a power of two, BX a gather task's words."""
    t = d.tiles
    return {"R": d.R, "D": d.D, "V": d.V, "BNV": t.bn_v, "STAGES": t.stages, "NORM_GP": pow2(d.D // 128), "BX": t.bx}


def scalars(d: LayerDims) -> dict:
    return {"eps": d.eps}


@triton.jit(do_not_specialize=["launch_id", "rank"])
def tail_kernel(
    # step inputs, weights, outputs
    hidden_ptr, residual_ptr, final_norm_ptr, lm_head_ptr, normed_ptr, logits_ptr,
    # sync: [epoch | arrivals], the error word, trace stamps, task counts; the TP group's peer buffers (TP > 1)
    sync_ptr, err_ptr, trace_ptr, task_count_ptr, peers_ptr,
    # scalars
    launch_id, bound, eps, rank,
    # geometry and tiles
    R: tl.constexpr, D: tl.constexpr, V: tl.constexpr, BNV: tl.constexpr, STAGES: tl.constexpr,
    NORM_GP: tl.constexpr, BX: tl.constexpr,
    # build options
    NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
    TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr,
    # the table: stage ids and task counts; TP and the exchange region's first word and slot words
    N_STAGES: tl.constexpr, S_NORM: tl.constexpr, S_LM_HEAD: tl.constexpr, S_GATHER: tl.constexpr,
    T_NORM: tl.constexpr, T_LM_HEAD: tl.constexpr, T_GATHER: tl.constexpr,
    TP: tl.constexpr, X_LOGITS_X: tl.constexpr, XW_LOGITS_X: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG. TP > 1: lm_head pushes
    this rank's logits shard to every rank and gather places every rank's (no hand-off between them: the words carry
    their epoch)."""
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, TRACE)
    tail.final_norm(hidden_ptr, residual_ptr, final_norm_ptr, normed_ptr, eps, pid, ok, task_count_ptr, S_NORM, T_NORM,
                    D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    tail.lm_head(normed_ptr, lm_head_ptr, logits_ptr, pid, ok, task_count_ptr, S_LM_HEAD, T_LM_HEAD, R, D, V, BNV,
                 STAGES, NPROG, SKIP_MASK, COUNT_TASKS, TP, peers_ptr, rank, epoch, X_LOGITS_X, XW_LOGITS_X)
    if TP > 1:
        ok = gather_stage(peers_ptr, rank, logits_ptr, err_ptr, launch_id, epoch, pid, ok, bound, task_count_ptr,
                          X_LOGITS_X, XW_LOGITS_X, V, S_GATHER, T_GATHER, BX, TP, NPROG, TIMER, SKIP_MASK, COUNT_TASKS)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(table=tail_kind.TABLE, kernel=tail_kernel, dims=layer_dims, constexprs=constexprs, scalars=scalars,
                  refusals=tail_kind.refusals)
"""The "tail" kind: the final norm and this rank's LM head (checked on the H200 at the TP8 shard, rows 1 and 8;
not yet timed)."""
