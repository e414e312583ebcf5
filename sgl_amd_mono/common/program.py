"""Launch programs: stages and tasks, their placement on resident programs, and the static checks.

A launch is a fixed sequence of stages; a stage is `n_tasks` independent tasks (tiles) that read
and write named buffers. A placement puts every task at a (program, position). On the device a
stage's tasks wait for the stage before it through an epoch-tagged arrival counter (a barrier
that is never reset: see `backends/triton/sync.py`). The checks run at build and in CI:
  * the wait-for graph over (program, position) is acyclic (else the launch could deadlock);
  * every buffer a stage reads is written by an earlier stage or is an input;
  * every cache row of a step is written by exactly one task;
  * scratch fits its allocation, and the grid fits the resident programs.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from typing import Callable, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: `n_tasks` tiles, the buffers they read and write, and the cache rows each writes."""

    name: str
    n_tasks: int  # tiles in this stage (may be an upper bound for data-dependent stages)
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    cache_rows: Optional[Callable[[int], Sequence[int]]] = None  # task -> step rows whose cache row it writes


@dataclasses.dataclass(frozen=True)
class Task:
    stage: int  # index into LaunchProgram.stages
    index: int  # tile within the stage


@dataclasses.dataclass
class LaunchProgram:
    """A launch: its stages, inputs, scratch buffers (bytes) and step rows."""

    name: str
    stages: list[Stage]
    inputs: tuple[str, ...]
    scratch: dict[str, int]  # buffer -> bytes
    rows: int  # step rows whose cache rows the launch writes

    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]


Placement = list[list[Task]]  # per program, its tasks in execution order


def place_round_robin(prog: LaunchProgram, n_programs: int) -> Placement:
    """What the persistent kernel does: stage by stage, task t on program t % n_programs."""
    if n_programs < 1:
        raise ValueError(f"n_programs {n_programs} must be >= 1")
    out: Placement = [[] for _ in range(n_programs)]
    for s, st in enumerate(prog.stages):
        for t in range(st.n_tasks):
            out[t % n_programs].append(Task(s, t))
    return out


def place_sequential(prog: LaunchProgram) -> Placement:
    """One program running every task in stage order (the interpreter placement)."""
    return place_round_robin(prog, 1)


def wait_for_edges(prog: LaunchProgram, placement: Placement) -> dict[tuple[int, int], set[tuple[int, int]]]:
    """Edges (program, position) -> nodes that must finish first: program order, and every task of
    the stage before a task's stage (the device barrier between consecutive stages)."""
    where: dict[Task, tuple[int, int]] = {}
    by_stage: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for p, tasks in enumerate(placement):
        for i, t in enumerate(tasks):
            if t in where:
                raise ValueError(f"task {prog.stages[t.stage].name}[{t.index}] is placed twice")
            where[t] = (p, i)
            by_stage[t.stage].append((p, i))
    deps: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for p, tasks in enumerate(placement):
        for i, t in enumerate(tasks):
            d = set()
            if i > 0:
                d.add((p, i - 1))
            if t.stage > 0:
                d.update(by_stage[t.stage - 1])
            deps[(p, i)] = d
    return deps


def check_acyclic(prog: LaunchProgram, placement: Placement) -> None:
    """Raise ValueError if the wait-for graph of `placement` has a cycle or misses a task."""
    placed = {t for tasks in placement for t in tasks}
    missing = [f"{st.name}[{i}]" for s, st in enumerate(prog.stages) for i in range(st.n_tasks) if Task(s, i) not in placed]
    if missing:
        raise ValueError(f"launch {prog.name}: tasks not placed: {', '.join(missing[:8])}")
    deps = wait_for_edges(prog, placement)
    indeg = {n: len(d) for n, d in deps.items()}
    users: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for n, d in deps.items():
        for m in d:
            users[m].append(n)
    ready = deque(n for n, k in indeg.items() if k == 0)
    seen = 0
    while ready:
        n = ready.popleft()
        seen += 1
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if seen != len(deps):
        stuck = sorted(n for n, k in indeg.items() if k > 0)[:4]
        desc = [f"program {p} position {i} ({prog.stages[placement[p][i].stage].name})" for p, i in stuck]
        raise ValueError(f"launch {prog.name}: the wait-for graph has a cycle through {'; '.join(desc)}")


def check_dataflow(prog: LaunchProgram) -> None:
    """Every buffer a stage reads is a launch input, written by an earlier stage, or written by the stage
    itself (a buffer its tasks hand each other: split-K parts summed by the last part to land)."""
    have = set(prog.inputs)
    for st in prog.stages:
        bad = [b for b in st.reads if b not in have and b not in st.writes]
        if bad:
            raise ValueError(f"launch {prog.name}: stage {st.name} reads {bad} before any stage writes them")
        have.update(st.writes)


def check_cache_writes(prog: LaunchProgram) -> None:
    """Every step row's cache row is written by exactly one task."""
    count: dict[int, list[str]] = defaultdict(list)
    for st in prog.stages:
        if st.cache_rows is None:
            continue
        for t in range(st.n_tasks):
            for r in st.cache_rows(t):
                count[r].append(f"{st.name}[{t}]")
    bad = [f"row {r} by {count.get(r, [])}" for r in range(prog.rows) if len(count.get(r, [])) != 1]
    extra = [f"row {r}" for r in count if not 0 <= r < prog.rows]
    if bad or extra:
        raise ValueError(f"launch {prog.name}: cache rows not written exactly once: {'; '.join(bad + extra)}")


def check_scratch(prog: LaunchProgram, available_bytes: int) -> None:
    need = sum(prog.scratch.values())
    if need > available_bytes:
        raise ValueError(f"launch {prog.name}: scratch needs {need} bytes, {available_bytes} available")


def resident_programs(*, n_sm: int, regs_per_thread: int, num_warps: int, smem_bytes: int,
                      regs_per_sm: int = 65536, smem_per_sm: int = 232448, max_blocks_per_sm: int = 32,
                      warp_size: int = 32, reg_unit: int = 8) -> int:
    """Programs that can be resident at once, from a compiled kernel's resources (occupancy).
    Registers are allocated per thread in units of reg_unit (NVIDIA: 256 a warp = 8 a thread)."""
    regs = -(-max(1, regs_per_thread) // reg_unit) * reg_unit
    by_regs = regs_per_sm // (regs * warp_size * num_warps)
    by_smem = smem_per_sm // smem_bytes if smem_bytes else max_blocks_per_sm
    return n_sm * max(0, min(by_regs, by_smem, max_blocks_per_sm))


# LDS a CU (bytes) of the AMD targets the launches compile for.
AMD_LDS_PER_CU = {"gfx950": 160 * 1024, "gfx942": 64 * 1024}


def resident_programs_amd(*, n_cu: int, vgprs: int, waves_per_program: int, lds_bytes: int, lds_per_cu: int,
                          vgprs_per_simd: int = 512, simds_per_cu: int = 4, max_waves_per_simd: int = 8,
                          vgpr_granule: int = 8) -> int:
    """Programs that can be resident at once on a CDNA GPU (gfx942 / gfx950): a wave takes `vgprs`
    (rounded up to the granule) of a SIMD's 512 unified VGPRs a lane, a CU has 4 SIMDs, a program's
    waves stay on one CU, and its LDS comes from the CU's. From the AOT compile's figures; no AMD GPU
    has confirmed them here."""
    regs = -(-max(1, vgprs) // vgpr_granule) * vgpr_granule
    waves_per_simd = min(vgprs_per_simd // regs, max_waves_per_simd)
    by_regs = simds_per_cu * waves_per_simd // waves_per_program
    by_lds = lds_per_cu // lds_bytes if lds_bytes else by_regs
    return n_cu * max(0, min(by_regs, by_lds))


def check_resident(name: str, grid: int, resident: int) -> None:
    """Spin-waits deadlock unless every program is resident: refuse a grid larger than occupancy."""
    if grid > resident:
        raise ValueError(f"launch {name}: grid {grid} exceeds the {resident} programs that can be resident")


def check_all(prog: LaunchProgram, placement: Placement, scratch_available: int) -> None:
    check_dataflow(prog)
    check_cache_writes(prog)
    check_scratch(prog, scratch_available)
    check_acyclic(prog, placement)
