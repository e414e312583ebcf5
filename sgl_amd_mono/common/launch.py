"""What every lowering of a launch kind shares at run time: build options, the grid, and the sync, error,
trace and task-count buffers laid out by the kind's table. Model-independent; imports nothing from SGLang.

One set of these buffers belongs to a plan (one kind at one width) and is shared by every layer launched
on it: layers run one after another on a stream, so each launch finds the sync words its predecessor left
(the epoch counts launches, not steps: `backends/triton/sync.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sgl_amd_mono.common import guard, trace
from sgl_amd_mono.common.kind import KindTable, SyncLayout


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """How a launch is built (the subset of SGLang's BuildContext a launch reads, and check switches)."""

    deadline_s: float = 2.0  # every device wait's bound
    placement: str = "persistent"  # "persistent" (grid = resident programs) or "sequential" (grid 1)
    n_programs: Optional[int] = None  # persistent grid; default: the device's SM count x programs a SM
    skip_arrive: int = -1  # a planted missing arrival at this stage (deadline tests only)
    skip_mask: int = 0  # timing variants only: bit s set = stage s runs no tasks (results invalid)
    trace: bool = False  # NVIDIA timing builds only: every program stamps the global timer at each stage
    count_tasks: bool = False  # interpreter checks: count the tasks each stage runs
    max_context: int = 0  # tokens a row may read at most (kinds that read a request's whole context); 0: the model's
    # one rank's launch alone at a TP > 1 shard: it keeps its partials (the kernels' TP 1 path at the shard: no push,
    # no cross-rank sum, no peer buffers). The single-GPU check and timing tools' runs of a TP shard, and the
    # push-free A/B of time_layers --tp-emulate; never a server's build (its outputs are one rank's partials)
    local_partials: bool = False
    # on a missed wait or a bad input: "drain" (check builds: the launch ends, the host reads the error word) or
    # "fault" (serving builds: the error word's host copy written, then a GPU fault at address 0x0; common/guard.py)
    on_error: str = "drain"


def grid_size(options: LaunchOptions, device: torch.device, *, progs_per_sm: int) -> int:
    """Programs of a persistent launch: 1 for the sequential placement (Triton's interpreter runs programs one
    after another, so a grid of 1 runs every task in stage order), else n_programs or SMs x progs_per_sm."""
    if options.placement == "sequential":
        return 1
    if options.placement != "persistent":
        raise ValueError(f"placement {options.placement!r} is not 'persistent' or 'sequential'")
    if device.type == "cuda":
        return options.n_programs or torch.cuda.get_device_properties(device).multi_processor_count * progs_per_sm
    if device.type == "meta" and options.n_programs:  # AOT compiles (survey)
        return options.n_programs
    raise ValueError(f"placement 'persistent' needs a GPU device (or meta with n_programs), got {device}")


class SyncBuffers:
    """A plan's device words: sync [layout.words] int32 (epoch, a counter a stage, the last-arrival counts),
    err [guard.ERR_WORDS] int64, trace [programs, 2 x stages] int64 (trace builds), task_count [stages]
    int32 (COUNT_TASKS builds)."""

    def __init__(self, table: KindTable, layout: SyncLayout, *, n_programs: int, device, on_error: str = "drain"):
        if on_error not in guard.ON_ERROR:
            raise ValueError(f"on_error {on_error!r} is not one of {list(guard.ON_ERROR)}")
        self.table, self.layout = table, layout
        z = lambda shape, dt: torch.zeros(shape, dtype=dt, device=device)  # noqa: E731
        self.sync = z((layout.words,), torch.int32)
        self.err = guard.new_error_word(device)
        # a fault build's host copy of the error word (its address in err[host_copy]); None in a drain build
        self.host_copy = guard.new_host_copy(device) if on_error == "fault" else None
        self._arm()
        self.trace = z((n_programs, 2 * layout.n_stages), torch.int64)
        self.task_count = z((layout.n_stages,), torch.int32)

    def count(self, name: str) -> torch.Tensor:
        """The words of last-arrival count `name` (a view of sync)."""
        at, n = self.layout.counts[name]
        return self.sync[at: at + n]

    @property
    def epoch(self) -> int:
        """Launches completed on these words (synchronises)."""
        return int(self.sync[0])

    def reset(self) -> None:
        """Zero the sync words and the error word (after a missed deadline; never needed otherwise)."""
        self.sync.zero_()
        self.err.zero_()
        self._arm()

    def _arm(self) -> None:
        if self.host_copy is not None:
            self.err[guard.ERR_FIELDS.index("host_copy")] = self.host_copy.data_ptr()

    def check_error(self, launch_names: dict) -> None:
        """RuntimeError naming the launch, stage and program that missed a deadline, if one did."""
        guard.check_error(self.err, launch_names, self.table.stage_names())

    def trace_table(self) -> list:
        """After a trace build's launch: `common.trace.stage_table` of its stamps (per-stage µs)."""
        return trace.stage_table(self.trace.cpu(), self.table.stage_names())

    def trace_own(self, stage: str):
        """After a trace build's launch: each program's own µs in `stage` (`common.trace.program_own`)."""
        return trace.program_own(self.trace.cpu(), self.table.stage_names(), stage)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.sync, self.err, self.trace, self.task_count))
