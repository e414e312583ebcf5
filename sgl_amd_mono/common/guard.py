"""Wait deadlines and error words: how a launch that misses a deadline stops and what the host reports.

Every device-side wait polls a readiness word until it reaches its target or a deadline passes.
On a miss the waiting program writes one error word (launch, stage, program, the stage it waited
on, the value seen and the target, the step's epoch) into `err: [ERR_WORDS] int64` and every
other waiting program sees `err[0] != 0` and drains, so the launch ends instead of hanging. The
host reads the word after the step (`check_error`) and raises a RuntimeError that says where: the check
tools' build ("drain").

A serving build ("fault") cannot drain: in a captured step nobody reads the word, and a set word would drain
every later launch into wrong tokens. So its error word holds the address of a host copy (`host_copy`: pinned
host memory on a GPU), and the program that writes the word writes the copy too, then stores to address 0x0:
the GPU faults, the process stops, and no logits come back (SGLang's binding promises that a failed wait stops
every rank with a GPU fault at address 0x0). The host copy outlives the fault: `FaultWatch` logs it, named
(launch, stage, program), from a daemon thread and at exit. A check build's host_copy is 0.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
from typing import Callable

import torch

log = logging.getLogger(__name__)

# err: [ERR_WORDS] int64, one word a field; the lowerings index it by these names (never by number)
ERR_FIELDS = ("flag", "launch", "stage", "program", "waited_on", "seen", "target", "epoch", "host_copy")
ERR_WORDS = len(ERR_FIELDS)
REPORTED = ERR_FIELDS[:-1]  # the fields a failing program writes (host_copy is the build's, set once)
ON_ERROR = ("drain", "fault")  # check builds drain and report; serving builds fault at address 0x0
ERR_FLAG = 0x5EAD  # err[0] once a deadline was missed (0 while healthy)
ERR_INPUT = 0x1BAD  # err[0] once a step input was found that the launch cannot serve (the first error wins)
ERR_INVARIANT = 0x1DEA  # err[0] once a launch found its own state inconsistent (a bug, not the input's fault)
ERR_PEER = 0x9EE5  # err[0] once a wait on a peer rank's push passed its deadline (waited_on = the peer, seen = the
# words of the waited block that arrived, target = the block's words)
# For ERR_INPUT the fields read: waited_on = the step row, seen = its value, target = the limit it passed, epoch =
# which input (INPUT_LENGTH: the row's length against its page table; INPUT_TOKEN: its token id against the
# vocabulary rows); for ERR_INVARIANT the same (the row whose value broke the invariant, the value, the limit).
INPUT_LENGTH = 0
INPUT_TOKEN = 1

# A spin-count bound is the portable deadline (Triton's interpreter, HIP, CUDA): one poll of a
# readiness word is an L2 round trip, >= ~0.5 us on H200 (shared/examples/sync_probe.py: 0.5 us a
# hand-off), so `deadline_s * POLLS_PER_S` polls last at least deadline_s / 2.
POLLS_PER_S = 2_000_000
MAX_POLLS = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Deadline:
    """A wait bound on the device: `timer_ns` for a global-timer wait (CUDA), `polls` otherwise."""

    seconds: float
    timer_ns: int  # globaltimer nanoseconds a wait may last
    polls: int  # polls a wait may make when no timer is used

    @classmethod
    def from_seconds(cls, seconds: float) -> "Deadline":
        if not (seconds > 0):
            raise ValueError(f"deadline_s {seconds!r} must be a positive number of seconds")
        return cls(
            seconds=float(seconds),
            timer_ns=int(seconds * 1e9),
            polls=max(1, min(MAX_POLLS, int(seconds * POLLS_PER_S))),
        )


def new_error_word(device) -> torch.Tensor:
    """err: [ERR_WORDS] int64 zeros (healthy)."""
    return torch.zeros(ERR_WORDS, dtype=torch.int64, device=device)


@dataclasses.dataclass(frozen=True)
class ErrorWord:
    """A decoded error word."""

    flag: int
    launch: int
    stage: int
    program: int
    waited_on: int
    seen: int
    target: int
    epoch: int
    host_copy: int = 0

    def describe(self, launch_names: dict[int, str] | None = None, stage_names: list[str] | None = None) -> str:
        launch = (launch_names or {}).get(self.launch, str(self.launch))
        sname = lambda i: stage_names[i] if stage_names and 0 <= i < len(stage_names) else str(i)  # noqa: E731
        if self.flag == ERR_INPUT and self.epoch == INPUT_TOKEN:
            return (f"launch {launch}: program {self.program} in stage {sname(self.stage)} found step row "
                    f"{self.waited_on}'s token id {self.seen} outside the vocabulary's {self.target} rows "
                    f"[0, {self.target}) (read as the nearest row)")
        if self.flag == ERR_INPUT:
            return (f"launch {launch}: program {self.program} in stage {sname(self.stage)} found step row "
                    f"{self.waited_on}'s length {self.seen} past the {self.target} keys its page table holds "
                    f"(read as {self.target})")
        if self.flag == ERR_PEER:
            return (f"launch {launch}: program {self.program} in stage {sname(self.stage)} missed its deadline "
                    f"waiting on rank {self.waited_on}'s push ({self.seen} of {self.target} words arrived, "
                    f"epoch {self.epoch})")
        if self.flag == ERR_INVARIANT:
            return (f"launch {launch}: program {self.program} in stage {sname(self.stage)} found row "
                    f"{self.waited_on}'s value {self.seen} past its limit {self.target} (a launch bug; the "
                    f"writes past the limit were dropped)")
        return (
            f"launch {launch}: program {self.program} in stage {sname(self.stage)} missed its deadline "
            f"waiting on stage {sname(self.waited_on)} (counter {self.seen}, target {self.target}, epoch {self.epoch})"
        )


def read_error(err: torch.Tensor) -> ErrorWord | None:
    """The decoded error word, or None while healthy (synchronises: call it outside the step)."""
    w = dict(zip(ERR_FIELDS, (int(v) for v in err.detach().to("cpu").tolist())))
    w.setdefault("host_copy", 0)
    if w["flag"] == 0:
        return None
    return ErrorWord(**w)


def check_error(err: torch.Tensor, launch_names=None, stage_names=None) -> None:
    """Raise RuntimeError naming where a deadline was missed or a bad step input was found, if one was."""
    e = read_error(err)
    if e is not None:
        what = {ERR_INPUT: "bad step input", ERR_INVARIANT: "launch invariant broken",
                ERR_PEER: "peer deadline missed"}.get(e.flag,
                                                                                       "device deadline missed")
        raise RuntimeError(f"{what}: " + e.describe(launch_names, stage_names))


def new_host_copy(device) -> torch.Tensor:
    """A fault build's host copy of its error word: [ERR_WORDS] int64 zeros in pinned host memory on a GPU (the
    GPU writes it before it faults, and the host reads it after), a plain tensor on CPU (the interpreter)."""
    t = torch.zeros(ERR_WORDS, dtype=torch.int64, pin_memory=torch.device(device).type == "cuda")
    return t


class FaultWatch:
    """Logs the host copy of every fault build's error word once a launch set it: a daemon thread polls the
    copies (host memory: no GPU call, so it works after the fault) and an exit hook looks once more.
    `watch(copy, describe)` registers one; describe(ErrorWord) -> str names the launch and stage."""

    _copies: list = []
    _reported: set = set()
    _lock = threading.Lock()
    _thread = None

    @classmethod
    def watch(cls, copy: torch.Tensor, describe: Callable[["ErrorWord"], str]) -> None:
        with cls._lock:
            cls._copies.append((copy, describe))
            if cls._thread is None:
                cls._thread = threading.Thread(target=cls._poll, name="sgl-amd-mono-fault-watch", daemon=True)
                cls._thread.start()
                atexit.register(cls.report)

    @classmethod
    def _poll(cls) -> None:
        import time

        while True:
            cls.report()
            time.sleep(0.05)

    @classmethod
    def report(cls) -> list[str]:
        """Log (error) each newly set host copy; returns the lines logged."""
        lines = []
        with cls._lock:
            for i, (copy, describe) in enumerate(cls._copies):
                if i in cls._reported or int(copy[0]) == 0:
                    continue
                w = dict(zip(ERR_FIELDS, (int(v) for v in copy.tolist())))
                cls._reported.add(i)
                lines.append(f"sgl-amd-mono: the GPU faulted at address 0x0 on purpose (a serving build): "
                             f"{describe(ErrorWord(**w))}")
                log.error(lines[-1])
        return lines
