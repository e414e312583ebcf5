"""Launch kinds as tables: a kind's stages, buffers and arrival counts, defined once, lowering-neutral.

A kind (one launch of a layer: "shared", later "indexer", "dense", ...) is a `KindTable`. Everything a
lowering needs about its layout is derived from that one table:
  * stage ids: a stage's position in `stages` (`stage_ids`);
  * the sync words (`sync_layout`): [epoch | one arrival counter a stage | each last-arrival count's
    words, in table order], so a count is found by its name, never by an offset written twice;
  * the peer words (`peer_layout`, TP > 1): the cross-rank exchange regions in table order, each TP slots of
    its words (rank p pushes into slot p of every rank's region), found by name as the counts are;
  * scratch shapes and dtypes (`shapes`), and the bytes the launch holds;
  * the static checks (`check`): every buffer a stage reads or writes is declared, every scratch buffer
    is written by exactly one stage and read by it or a later one, the dataflow, the cache rows written exactly
    once, the wait-for graph of a placement acyclic.
Sizes are functions of a kind's resolved dimensions (`dims`: geometry, width, tiles and grid, whatever
the kind defines); a kind module builds its dims and its table and nothing else.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Sequence

import torch

from sgl_amd_mono.common import program

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "fp8": torch.float8_e4m3fn, "i32": torch.int32,
          "i64": torch.int64, "u8": torch.uint8}


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A named tensor a launch reads or writes. `shape(dims)` gives its dims (None: any size, e.g. the
    cache's slots); `dtype` is a DTYPES key or a function of dims (the cache's dtype follows the build)."""

    name: str
    shape: Callable[[Any], tuple]
    dtype: Any  # str (DTYPES key) or Callable[[dims], torch.dtype]
    doc: str = ""
    is_strided: bool = False  # weights read through their strides (lowerings pass them by name)

    def torch_dtype(self, dims) -> torch.dtype:
        return DTYPES[self.dtype] if isinstance(self.dtype, str) else self.dtype(dims)


@dataclasses.dataclass(frozen=True)
class Count:
    """An epoch-tagged last-arrival count: `words(dims)` int32 words in the sync buffer, each of which
    takes `parts(dims)` arrivals a launch (the last to arrive may read all the parts)."""

    name: str
    words: Callable[[Any], int]
    parts: Callable[[Any], int]


@dataclasses.dataclass(frozen=True)
class Exchange:
    """A cross-rank exchange region of a launch's peer buffers (TP > 1): TP slots of `words(dims)` 64-bit words
    each, one slot a rank. Rank p pushes its part into slot p of every rank's region; each rank waits on its own
    region only (`backends/triton/exchange.py`). A stage that pushes names the region in its writes, one that
    waits in its reads."""

    name: str
    words: Callable[[Any], int]  # 64-bit words of one rank's slot
    doc: str = ""


@dataclasses.dataclass(frozen=True)
class PeerLayout:
    """Where each exchange region lives in a rank's peer buffer: {name: (first word, words a slot)}; `words` in
    all (TP x each region's slot words). Empty at TP 1 (nothing is exchanged)."""

    regions: dict
    words: int

    @property
    def nbytes(self) -> int:
        return 8 * self.words


@dataclasses.dataclass(frozen=True)
class StageDef:
    """One stage of a kind: `tasks(dims)` tasks (an upper bound when `is_bound`: data-dependent stages),
    the buffers they read and write, the last-arrival counts they take, and the step rows whose cache rows
    task t writes (`cache_rows(dims, t)`)."""

    name: str
    tasks: Callable[[Any], int]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    counts: tuple[Count, ...] = ()
    cache_rows: Optional[Callable[[Any, int], Sequence[int]]] = None
    is_bound: bool = False
    doc: str = ""


@dataclasses.dataclass(frozen=True)
class SyncLayout:
    """Where each sync word lives: [epoch | arrival counter of stage s at 1 + s | counts...]."""

    n_stages: int
    counts: dict  # count name -> (first word, words)
    words: int  # total int32 words

    def arrival(self, stage: int) -> int:
        return 1 + stage


@dataclasses.dataclass(frozen=True)
class KindTable:
    """A launch kind: its step inputs, layer weights, outputs, scratch and stages (in launch order)."""

    name: str
    inputs: tuple[Buffer, ...]
    weights: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    scratch: tuple[Buffer, ...]
    stages: tuple[StageDef, ...]
    cache: str = ""  # the input buffer whose rows the cache_rows stages write
    in_place: tuple[str, ...] = ()  # other inputs a stage writes in place (a second cache)
    exchanges: tuple[Exchange, ...] = ()  # the cross-rank regions (TP > 1), in peer-buffer order

    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def stage_ids(self) -> dict[str, int]:
        return {s.name: i for i, s in enumerate(self.stages)}

    def stage_id(self, name: str) -> int:
        ids = self.stage_ids()
        if name not in ids:
            raise ValueError(f"kind {self.name}: {name!r} is not a stage ({', '.join(ids)})")
        return ids[name]

    def buffers(self) -> dict[str, Buffer]:
        return {b.name: b for b in (*self.inputs, *self.weights, *self.outputs, *self.scratch)}

    def sync_layout(self, dims) -> SyncLayout:
        at, counts = 1 + len(self.stages), {}
        for st in self.stages:
            for c in st.counts:
                n = int(c.words(dims))
                counts[c.name] = (at, n)
                at += n
        return SyncLayout(n_stages=len(self.stages), counts=counts, words=at)

    def peer_layout(self, dims) -> PeerLayout:
        """The exchange regions' places in a rank's peer buffer at dims.tp ranks (none at TP 1)."""
        tp = int(getattr(dims, "tp", 1))  # dims of a kind with no TP shard: one rank
        if tp == 1:
            return PeerLayout(regions={}, words=0)
        at, regions = 0, {}
        for x in self.exchanges:
            n = int(x.words(dims))
            regions[x.name] = (at, n)
            at += tp * n
        return PeerLayout(regions=regions, words=at)

    def shapes(self, group: str, dims) -> dict[str, tuple[tuple, torch.dtype]]:
        """{name: (shape, dtype)} of one buffer group ("inputs", "weights", "outputs", "scratch")."""
        return {b.name: (tuple(b.shape(dims)), b.torch_dtype(dims)) for b in getattr(self, group)}

    def scratch_bytes(self, dims) -> dict[str, int]:
        return {k: math.prod(s) * torch.empty((), dtype=dt).element_size() for k, (s, dt) in self.shapes("scratch", dims).items()}

    def task_counts(self, dims) -> dict[str, int]:
        return {s.name: int(s.tasks(dims)) for s in self.stages}

    def program(self, dims, *, rows: int, label: str = "") -> program.LaunchProgram:
        """The kind as a `LaunchProgram` (stages of task counts), for the placement checks; `rows` step rows
        each write one row of the cache (a kind without a cache writes none)."""
        stages = [program.Stage(s.name, int(s.tasks(dims)), s.reads, s.writes,
                                cache_rows=(lambda t, f=s.cache_rows: f(dims, t)) if s.cache_rows else None)
                  for s in self.stages]
        return program.LaunchProgram(name=label or self.name, stages=stages,
                                     inputs=tuple(b.name for b in (*self.inputs, *self.weights)),
                                     scratch=self.scratch_bytes(dims), rows=rows if self.cache else 0)

    def check_table(self) -> None:
        """Layout checks that need no dims: names unique and declared, each scratch buffer written by exactly
        one stage and read by that stage or a later one, each output written, counts named once."""
        bad = []
        names = [b.name for b in (*self.inputs, *self.weights, *self.outputs, *self.scratch)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            bad.append(f"buffers declared twice: {dup}")
        stage_names = self.stage_names()
        if len(set(stage_names)) != len(stage_names):
            bad.append(f"stage names repeat: {stage_names}")
        xnames = [x.name for x in self.exchanges]
        if set(xnames) & set(names) or len(set(xnames)) != len(xnames):
            bad.append(f"exchange regions named twice or as buffers: {xnames}")
        declared = set(names) | set(xnames)
        writers: dict[str, list[int]] = {}
        readers: dict[str, list[int]] = {}
        for i, st in enumerate(self.stages):
            for b in (*st.reads, *st.writes):
                if b not in declared:
                    bad.append(f"stage {st.name} names buffer {b!r}, which is not declared")
            for b in st.writes:
                writers.setdefault(b, []).append(i)
            for b in st.reads:
                readers.setdefault(b, []).append(i)
        for b in (*self.scratch, *self.exchanges):
            what = "exchange region" if isinstance(b, Exchange) else "scratch buffer"
            w = writers.get(b.name, [])
            if len(w) != 1:
                bad.append(f"{what} {b.name} is written by {len(w)} stages (must be exactly 1)")
            elif not any(r >= w[0] for r in readers.get(b.name, [])):
                bad.append(f"{what} {b.name} is never read by stage {self.stages[w[0]].name} or a later one")
        for b in self.outputs:
            if b.name not in writers:
                bad.append(f"output {b.name} is written by no stage")
        for b in (*self.inputs, *self.weights):
            if b.name in writers and b.name != self.cache and b.name not in self.in_place:
                bad.append(f"{b.name} is a launch input but stage {self.stages[writers[b.name][0]].name} writes it")
        counts = [c.name for st in self.stages for c in st.counts]
        if len(set(counts)) != len(counts):
            bad.append(f"last-arrival counts named twice: {counts}")
        if bad:
            raise ValueError(f"kind {self.name}: " + "; ".join(bad))

    def check(self, dims, *, rows: int, n_programs: int, scratch_limit: int, label: str = "") -> program.LaunchProgram:
        """Every static check of the kind at these dims and grid; returns the checked program."""
        self.check_table()
        prog = self.program(dims, rows=rows, label=label)
        program.check_all(prog, program.place_round_robin(prog, n_programs), scratch_limit)
        return prog


def check_task_counts(table: KindTable, dims, counted: Sequence[int]) -> None:
    """The tasks a build ran per stage (an interpreter build's counts) against the table: equal for a
    fixed stage, at most the table's for a data-dependent one (`is_bound`). ValueError lists each miss."""
    if len(counted) != len(table.stages):
        raise ValueError(f"kind {table.name}: {len(counted)} task counts for {len(table.stages)} stages")
    bad = []
    for st, n in zip(table.stages, counted):
        want = int(st.tasks(dims))
        if (n > want) if st.is_bound else (n != want):
            bad.append(f"{st.name} ran {int(n)} tasks, the table says {'at most ' if st.is_bound else ''}{want}")
    if bad:
        raise ValueError(f"kind {table.name}: " + "; ".join(bad))
