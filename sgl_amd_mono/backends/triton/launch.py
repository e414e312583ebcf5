"""Plan once, run many: a launch kind built in Triton for one width, and its layers launched on it.

`LaunchPlan(kind, geo, tp=, width=, kv_dtype=, device=, options=, tiles=)` resolves the tiles and grid,
runs the kind's static checks, and allocates the scratch, outputs and sync words every layer of that width
shares. `plan.bind(weights, launch_id=)` checks one layer's weights against the kind's table once (shapes,
dtypes, 16-byte alignment; read in place, never copied) and compiles the kernel the first time (inside
build, never on a step: every later bind must hit the same compiled kernel or compile its own variant
there, logged). `plan.run(layer, step)` only assembles the arguments by name and launches: no host sync,
CUDA-graph capturable; it returns the plan's output buffers (views reused by the next launch).

Arguments are passed by name, derived from the table (`TritonKind.kwargs`): buffer `x` -> `x_ptr`; a strided
weight's strides -> `stride_x_<dim>`; an input whose first dim is free (the cache's slots) -> `stride_x`; a
last-arrival count's first word in sync -> `C_<COUNT>`; stage ids `S_<NAME>`, fixed task counts
`T_<NAME>`, `N_STAGES`; an exchange region's first word in the peer buffer and its slot words -> `X_<NAME>`,
`XW_<NAME>` (0 at TP 1), `TP`; then the kind's own constexprs and scalars.

At TP > 1 a plan is one rank's (`rank`) and its launches push into and wait on the TP group's peer buffers
(`common/peer.py`: `peers`, this rank's view, attached at build with `attach_peers`: a plan tells how many bytes
its table's exchange regions take, `peer_nbytes`, before the group allocates them, all ranks or none).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Mapping

import torch

from sgl_amd_mono.common import guard, program
from sgl_amd_mono.common.kind import KindTable
from sgl_amd_mono.common.launch import LaunchOptions, SyncBuffers, grid_size

log = logging.getLogger(__name__)

SCRATCH_LIMIT = 512 * 2**20  # bytes a plan may take for scratch


@dataclasses.dataclass(frozen=True)
class TritonKind:
    """A kind's Triton lowering: its table, its kernel, and how its dims become constexprs and scalars."""

    table: KindTable
    kernel: Any  # the @triton.jit kernel
    dims: Callable[..., Any]  # (geo, *, tp, width, tiles, n_programs, kv_dtype, options) -> dims
    constexprs: Callable[[Any], dict]  # dims -> the kernel's geometry and tile constexprs
    scalars: Callable[[Any], dict]  # dims -> the kernel's float arguments
    refusals: Callable[..., list]  # (geo, *, tp, width, kv_dtype) -> reasons this kind cannot be built
    # kernel parameter -> the table's argument passed to it, where a kernel serves two tables (the tokens kind's
    # embedding as the dense kernel's hidden_ptr)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    absent: tuple = ()  # kernel parameters the table has no buffer for, passed as None (read under a constexpr off)

    def table_constexprs(self, dims) -> dict:
        """C_<COUNT> (a last-arrival count's first word in sync), N_STAGES, S_<NAME> (stage ids), T_<NAME>
        (task counts of the fixed stages), TP and X_<REGION> / XW_<REGION> (an exchange region's first word in the
        peer buffer and its slot words; 0 at TP 1), from the table."""
        out = {f"C_{c.upper()}": at for c, (at, _) in self.table.sync_layout(dims).counts.items()}
        regions = self.table.peer_layout(dims).regions
        for x in self.table.exchanges:
            out[f"X_{x.name.upper()}"], out[f"XW_{x.name.upper()}"] = regions.get(x.name, (0, 0))
        if self.table.exchanges:
            out["TP"] = int(dims.tp)
        out["N_STAGES"] = len(self.table.stages)
        for i, st in enumerate(self.table.stages):
            out[f"S_{st.name.upper()}"] = i
            if not st.is_bound:
                out[f"T_{st.name.upper()}"] = int(st.tasks(dims))
        return out


def _field(obj, name: str):
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def _dtype_ok(t: torch.Tensor, want: torch.dtype) -> bool:
    return t.dtype == want or (want == torch.float8_e4m3fn and t.dtype == torch.uint8)  # SGLang's fp8 store dtype


def check_tensors(buffers, tensors: Mapping[str, Any], dims, *, what: str) -> dict[str, torch.Tensor]:
    """`tensors` against the table's `buffers`: every one present with the declared shape (a None dim takes
    any size; a [S, 1, X] tensor passes for [S, X]) and dtype (uint8 passes for fp8, read as fp8), 16-byte
    aligned, and contiguous unless the buffer is read through its strides. Returns them normalised;
    ValueError lists every mismatch."""
    bad, out = [], {}
    for b in buffers:
        t = tensors.get(b.name) if isinstance(tensors, Mapping) else getattr(tensors, b.name, None)
        want_shape, want_dt = tuple(b.shape(dims)), b.torch_dtype(dims)
        if t is None:
            bad.append(f"{what} {b.name} is missing")
            continue
        if t.dim() == len(want_shape) + 1 and want_shape[0] is None and t.shape[1] == 1:
            t = t.view(t.shape[0], *t.shape[2:])
        shape_ok = len(t.shape) == len(want_shape) and all(w is None or w == g for w, g in zip(want_shape, t.shape))
        dims_ok = shape_ok and (b.is_strided or t.is_contiguous() or (want_shape[0] is None and t.stride(-1) == 1))
        if not (shape_ok and _dtype_ok(t, want_dt) and dims_ok):
            shown = tuple("S" if w is None else w for w in want_shape)
            bad.append(f"{what} {b.name} is {tuple(t.shape)} {t.dtype}{'' if dims_ok or not shape_ok else ' (not contiguous)'}, "
                       f"the launch was built for {list(shown)} {want_dt}")
            continue
        if t.device.type != "meta" and t.data_ptr() % 16:
            bad.append(f"{what} {b.name} is not 16-byte aligned (address {t.data_ptr():#x})")
            continue
        out[b.name] = t.view(torch.float8_e4m3fn) if t.dtype == torch.uint8 and want_dt != torch.uint8 else t
    if bad:
        raise ValueError("; ".join(bad))
    return out


def _pointer_args(buffers, tensors: Mapping[str, torch.Tensor]) -> dict:
    out = {}
    for b in buffers:
        t = tensors[b.name]
        out[f"{b.name}_ptr"] = t
        if b.is_strided:
            out.update({f"stride_{b.name}_{i}": s for i, s in enumerate(t.stride())})
    return out


def _jit_cache_size(kernel) -> int | None:
    """Compiled variants the JIT holds (Triton 3.6 / 3.8 `device_caches`); None where it cannot tell."""
    caches = getattr(kernel, "device_caches", None)
    if not caches:
        return None
    try:
        return sum(len(c[0]) for c in caches.values())
    except (TypeError, IndexError):
        return None


@dataclasses.dataclass(frozen=True)
class BoundLayer:
    """One layer's weights bound to a plan: its kernel arguments, checked once."""

    launch_id: int  # named in the error word (the layer's index)
    args: dict


class LaunchPlan:
    """One kind built for one (TP shard, width, KV dtype, grid); every layer of that width launches on it."""

    def __init__(self, kind: TritonKind, geo, *, tp: int, width: int, kv_dtype: torch.dtype, device,
                 options: LaunchOptions = LaunchOptions(), tiles, rank: int = 0):
        bad = kind.refusals(geo, tp=tp, width=width, kv_dtype=kv_dtype)
        if bad:
            raise ValueError(f"{kind.table.name} launch refused: " + "; ".join(bad))
        self.kind, self.table, self.geo = kind, kind.table, geo
        self.tp, self.width, self.kv_dtype, self.options = tp, width, kv_dtype, options
        self.device = torch.device(device)
        self.interpret = self.device.type == "cpu"
        self.n_programs = grid_size(options, self.device, progs_per_sm=tiles.progs_per_sm)
        try:
            self.tiles = tiles.resolve(geo, tp=tp, width=width, n_programs=self.n_programs, kind=kind.table.name)
        except ValueError as e:
            raise ValueError(f"{kind.table.name} launch refused: {e}") from None
        self.num_warps = self.tiles.num_warps
        self.dims = kind.dims(geo, tp=tp, width=width, tiles=self.tiles, n_programs=self.n_programs, kv_dtype=kv_dtype,
                              options=options)
        if not 0 <= rank < tp:
            raise ValueError(f"{kind.table.name} launch refused: rank {rank} is not in [0, tp {tp})")
        self.rank = rank
        self.name = f"{self.table.name}[tp{tp},w{width}]" + (f" rank {rank}" if tp > 1 else "")
        self.program = self.table.check(self.dims, rows=width, n_programs=self.n_programs, scratch_limit=SCRATCH_LIMIT,
                                        label=self.name)
        if options.trace and not (self.device.type == "cuda" and torch.version.hip is None):
            raise ValueError("trace builds need an NVIDIA GPU (they read its global timer)")
        self.deadline = guard.Deadline.from_seconds(options.deadline_s)
        self.timer = self.device.type == "cuda" and torch.version.hip is None
        self.bound = self.deadline.timer_ns if self.timer else self.deadline.polls
        mk = lambda shape, dt: torch.zeros(shape, dtype=dt, device=self.device)  # noqa: E731
        self.scratch = {k: mk(s, dt) for k, (s, dt) in self.table.shapes("scratch", self.dims).items()}
        self.out = {k: mk(s, dt) for k, (s, dt) in self.table.shapes("outputs", self.dims).items()}
        self.sync = SyncBuffers(self.table, self.table.sync_layout(self.dims), n_programs=self.n_programs,
                                device=self.device, on_error=options.on_error)
        if self.sync.host_copy is not None:  # a serving build: its fault is logged from the host copy
            guard.FaultWatch.watch(self.sync.host_copy, self.describe_error)
        self.peer_layout = self.table.peer_layout(self.dims)
        self.peers = None  # the TP group's peer buffers (attach_peers); TP 1: none
        # the kernel's peers_ptr until then (and at TP 1): the compiled signature is the same (an int64 tensor)
        self._no_peers = torch.zeros(max(tp, 1), dtype=torch.int64, device=self.device)
        self.compiled = None
        self.resources: dict = {}
        self.compile_s = 0.0
        log.info("%s: scratch %.1f MiB, outputs %.2f MiB, sync %d B; grid %d", self.name, self.scratch_bytes() / 2**20,
                 sum(t.numel() * t.element_size() for t in self.out.values()) / 2**20, self.sync.nbytes(),
                 self.n_programs)

    # ---- the TP group's peer buffers ----
    @property
    def peer_nbytes(self) -> int:
        """Bytes of peer buffer this plan's exchange regions take a rank (0 at TP 1)."""
        return self.peer_layout.nbytes

    def attach_peers(self, peers) -> None:
        """This rank's view of the group's peer buffers (`common/peer.PeerBuffers`), checked against the plan: its
        rank, the group's size, at least `peer_nbytes` bytes, 8-byte aligned. Zeroes this rank's region words (a
        word of an earlier use could carry an epoch this plan's launches reach)."""
        bad = []
        if peers.size != self.tp:
            bad.append(f"the peer buffers are a group of {peers.size}, the plan is TP {self.tp}")
        if peers.rank != self.rank:
            bad.append(f"the peer buffers are rank {peers.rank}'s, the plan is rank {self.rank}'s")
        if peers.nbytes < self.peer_nbytes:
            bad.append(f"the peer buffer holds {peers.nbytes} bytes, the plan's exchange regions take "
                       f"{self.peer_nbytes}")
        if peers.local.data_ptr() % 8:
            bad.append(f"the peer buffer is not 8-byte aligned (address {peers.local.data_ptr():#x})")
        if bad:
            raise ValueError(f"{self.name}: " + "; ".join(bad))
        peers.local[: self.peer_nbytes].zero_()
        self.peers = peers

    def _peer_words(self) -> torch.Tensor:
        """This rank's peer buffer as int64 words (its exchange regions)."""
        return self.peers.local[: self.peer_nbytes].view(torch.int64)

    def exchange_words(self) -> dict[str, torch.Tensor]:
        """{region: [TP, slot words] int64}: this rank's exchange regions as the last launch left them (every rank's
        pushed words; the sum stages' oracle reads them). Empty at TP 1."""
        if self.peers is None:
            return {}
        w = self._peer_words()
        return {name: w[at: at + self.tp * n].view(self.tp, n) for name, (at, n) in self.peer_layout.regions.items()}

    # ---- what it holds ----
    def scratch_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.scratch.values())

    # ---- arguments, by name ----
    def _fixed_args(self, *, timer=None) -> dict:
        d, o = self.dims, self.options
        args = {f"{k}_ptr": v for k, v in self.out.items()}
        args.update({f"{k}_ptr": v for k, v in self.scratch.items()})
        args.update(sync_ptr=self.sync.sync, err_ptr=self.sync.err, trace_ptr=self.sync.trace,
                    task_count_ptr=self.sync.task_count, bound=self.bound)
        if self.table.exchanges:
            args.update(peers_ptr=self.peers.ptrs if self.peers is not None else self._no_peers, rank=self.rank)
        args.update(self.kind.scalars(d))
        args.update(self.kind.constexprs(d))
        args.update(self.kind.table_constexprs(d))
        if o.local_partials and "TP" in args:  # timing only: the kernels' TP 1 path at this shard
            args["TP"] = 1
        args.update(NPROG=self.n_programs, TIMER=self.timer if timer is None else timer, SKIP_ARRIVE=o.skip_arrive,
                    SKIP_MASK=o.skip_mask, TRACE=o.trace, COUNT_TASKS=o.count_tasks)
        return args

    def step_args(self, step) -> dict:
        """The step's tensors checked against the table's inputs, as kernel arguments."""
        ts = check_tensors(self.table.inputs, _as_mapping(step, self.table.inputs), self.dims, what="step input")
        args = _pointer_args(self.table.inputs, ts)
        for b in self.table.inputs:
            if b.shape(self.dims)[0] is None:  # rows of free count (the cache's slots): their stride
                args[f"stride_{b.name}"] = ts[b.name].stride(0)
        return args

    def kernel_args(self, layer: BoundLayer, step, *, timer=None) -> dict:
        """Every kernel argument by name for one launch (also used by AOT compiles, where `timer` says the
        target is NVIDIA, whose global timer bounds the waits)."""
        args = {**self._fixed_args(timer=timer), **layer.args, "launch_id": layer.launch_id, **self.step_args(step)}
        for param, name in self.kind.aliases.items():
            args[param] = args.pop(name)
        return {**args, **{p: None for p in self.kind.absent}}

    # ---- build: bind weights, compile ----
    def bind(self, weights, *, launch_id: int = 0, example_step=None) -> BoundLayer:
        """One layer's weights (a mapping or object with the table's weight names) checked and bound in
        place. The first bind compiles (with `example_step`, or empty tensors of the step's shapes)."""
        ws = check_tensors(self.table.weights, _as_mapping(weights, self.table.weights), self.dims,
                           what=f"{self.name} weight")
        layer = BoundLayer(launch_id=int(launch_id), args=_pointer_args(self.table.weights, ws))
        if not self.interpret and self.device.type != "meta":
            self._compile(layer, example_step if example_step is not None else self.example_step())
        return layer

    def example_step(self) -> dict:
        """Empty step tensors of the table's shapes (one cache slot), for compiling."""
        return self._empties(self.table.inputs)

    def example_weights(self, device=None) -> dict:
        """Empty contiguous weight tensors of the table's shapes, on `device` (default the plan's; AOT compiles;
        SGLang's strided weights are transposed views: pass those as they are)."""
        return self._empties(self.table.weights, device)

    def _empties(self, buffers, device=None) -> dict:
        d = self.dims
        return {b.name: torch.empty(tuple(1 if s is None else s for s in b.shape(d)), dtype=b.torch_dtype(d),
                                    device=self.device if device is None else device) for b in buffers}

    def _compile(self, layer: BoundLayer, step) -> None:
        kernel, grid = self.kind.kernel, (self.n_programs,)
        before = _jit_cache_size(kernel)
        t0 = time.perf_counter()
        k = kernel.warmup(grid=grid, num_warps=self.num_warps, **self.tiles.compile_options(),
                          **self.kernel_args(layer, step))
        dt = time.perf_counter() - t0
        after = _jit_cache_size(kernel)
        if self.compiled is not None:
            if before is not None and after != before:
                log.warning("%s: layer %d compiled a second variant in %.1f s (its arguments specialise differently)",
                            self.name, layer.launch_id, dt)
            return
        if hasattr(k, "_init_handles"):
            k._init_handles()
        self.compiled, self.compile_s = k, dt
        self._check_resident(k)
        log.info("%s: compiled in %.1f s: %s", self.name, dt, self.resources)

    def _check_resident(self, k) -> None:
        props = torch.cuda.get_device_properties(self.device)
        if torch.version.hip is not None:  # CDNA: k.n_regs is the wave's VGPR count (not run here)
            from sgl_amd_mono.backends.triton.tiles import target_of

            resident = program.resident_programs_amd(
                n_cu=props.multi_processor_count, vgprs=k.n_regs, waves_per_program=self.num_warps,
                lds_bytes=k.metadata.shared, lds_per_cu=program.AMD_LDS_PER_CU[target_of(self.device)])
        else:
            resident = program.resident_programs(n_sm=props.multi_processor_count, regs_per_thread=k.n_regs,
                                                 num_warps=self.num_warps, smem_bytes=k.metadata.shared)
        program.check_resident(self.name, self.n_programs, resident)
        self.resources = {"n_regs": k.n_regs, "n_spills": k.n_spills, "smem": k.metadata.shared,
                          "resident": resident, "grid": self.n_programs, "num_warps": self.num_warps,
                          "hash": str(getattr(k, "hash", ""))[:12]}

    def compiled_variants(self) -> int | None:
        """Compiled variants of the kind's kernel in this process now (every plan's): a step must add none."""
        return _jit_cache_size(self.kind.kernel)

    # ---- run ----
    def run(self, layer: BoundLayer, step) -> dict[str, torch.Tensor]:
        """Launch one layer on one step (capturable: no host sync, fixed buffers). Returns the outputs
        {name: tensor} (the plan's own buffers: read them before the next launch on this plan)."""
        if self.compiled is None and not self.interpret:
            raise RuntimeError(f"{self.name}: not compiled; bind a layer's weights at build before running a step")
        if self.tp > 1 and self.peers is None and not self.options.local_partials:
            raise RuntimeError(f"{self.name}: no peer buffers attached (a TP {self.tp} launch exchanges its partial "
                               "sums through them: attach_peers at build)")
        self.kind.kernel[(self.n_programs,)](num_warps=self.num_warps, **self.tiles.compile_options(),
                                             **self.kernel_args(layer, step))
        return self.out

    # ---- after a step ----
    def check_error(self) -> None:
        """RuntimeError naming the layer, stage and program that missed a deadline, if one did."""
        e = guard.read_error(self.sync.err)
        if e is not None:
            self.sync.check_error(self._launch_names(e))

    def _launch_names(self, e: guard.ErrorWord) -> dict:
        return {e.launch: f"{self.name} layer {e.launch}"}

    def describe_error(self, e: guard.ErrorWord) -> str:
        return e.describe(self._launch_names(e), self.table.stage_names())

    def reset_sync(self) -> None:
        """After a missed deadline: zero the sync and error words, the scratch (a stage may have left a partial
        accumulation) and this rank's exchange words (the epochs restart, so an old word could pass for a new one:
        every rank of the group resets together)."""
        self.sync.reset()
        for t in self.scratch.values():
            t.zero_()
        if self.peers is not None:
            self._peer_words().zero_()

    def trace_table(self) -> list:
        return self.sync.trace_table()

    def trace_own(self, stage: str):
        return self.sync.trace_own(stage)


def _as_mapping(obj, buffers) -> dict:
    if isinstance(obj, Mapping):
        return dict(obj)
    return {b.name: getattr(obj, b.name, None) for b in buffers}
