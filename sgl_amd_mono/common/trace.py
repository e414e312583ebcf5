"""Where a persistent launch's time goes, from per-program timer stamps (trace builds only).

stamps: [n_programs, 2 * n_stages] int64 ns. For stage s < n_stages - 1: [:, 2s] = when the program's
tasks of s were done (its arrival), [:, 2s + 1] = when it left the wait for s. The last stage has
only its done stamp at [:, 2(n-1)]; [:, 2n - 1] holds the launch start.
"""

from __future__ import annotations


def stage_table(stamps, names) -> list[dict]:
    """One row per stage, µs from the launch start (the earliest program's):

    start: the last program out of the previous wait (the stage cannot be done before);
    work: the last arrival minus start (the slowest program's tasks plus its late start);
    sync: the last program out of this stage's wait minus the last arrival (the hand-off itself);
    span: work + sync, the stage's share of the launch (spans sum to the launch's length);
    own: the median over programs of each one's own time in the stage (its arrival minus its own exit from the
    previous wait; the lower middle of an even count), so a work far above it is one late program's;
    last: the program that arrived last; last_own: its own time (near work: the stage waits on that program's
    tasks; far below: on its late start);
    own_p90: the 90th percentile of the programs' own times (the higher of two neighbours).
    A stage no program stamped in this launch (a stage the build passes without its work, e.g. a cross-rank sum
    at one rank) has every field but its name None, and the next stage starts where it would have.
    """
    n = len(names)
    t = _checked(stamps, n)
    t0 = t[:, 2 * n - 1].min()
    rows, prev = [], t[:, 2 * n - 1].max()
    for s, (name, own) in enumerate(zip(names, _own_times(t, n))):
        if own is None:  # never stamped (zeros): not a stage of this launch
            rows.append({"stage": name, "start": None, "work": None, "sync": None, "span": None, "own": None,
                         "last": None, "own_p90": None, "last_own": None})
            continue
        done = t[:, 2 * s].max()
        out = t[:, 2 * s + 1].max() if s < n - 1 else done
        last = int(t[:, 2 * s].argmax())
        rows.append({"stage": name, "start": float(prev - t0) / 1e3, "work": float(done - prev) / 1e3,
                     "sync": float(out - done) / 1e3, "span": float(out - prev) / 1e3,
                     "own": float(own.median()) / 1e3, "last": last,
                     "own_p90": float(own.quantile(0.9, interpolation="higher")) / 1e3, "last_own": float(own[last]) / 1e3})
        prev = out
    return rows


def program_own(stamps, names, stage: str):
    """Each program's own time in `stage` (µs, [programs]: its arrival minus its own exit from the previous
    stamped stage's wait, or its start), as `stage_table`'s own and own_p90 summarize it; None if no program
    stamped it."""
    if stage not in names:
        raise ValueError(f"{stage!r} is not a stage of this launch ({', '.join(names)})")
    own = _own_times(_checked(stamps, len(names)), len(names))[names.index(stage)]
    return None if own is None else own / 1e3


def _checked(stamps, n: int):
    if tuple(stamps.shape[1:]) != (2 * n,):
        raise ValueError(f"stamps are {tuple(stamps.shape)}, expected [programs, {2 * n}] for {n} stages")
    return stamps.double()


def _own_times(t, n: int) -> list:
    """Per stage: each program's arrival minus its own exit from the previous stamped stage's wait (ns), or None
    for a stage no program stamped."""
    t0 = t[:, 2 * n - 1].min()
    owns, prev_own = [], t[:, 2 * n - 1]
    for s in range(n):
        done = t[:, 2 * s].max()
        if done <= 0 or done < t0:
            owns.append(None)
            continue
        owns.append(t[:, 2 * s] - prev_own)
        prev_own = t[:, 2 * s + 1]
    return owns


def format_table(rows) -> str:
    """`stage_table`'s rows as a markdown table (rows from before own / last, or own_p90 / last_own: without them)."""
    lines = ["| stage | start us | work us | sync us | span us | own us | last | own p90 us | last's own us |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows_run = [r for r in rows if r["span"] is not None]

    def extra(r):
        own, last, p90, last_own = (r.get(k) for k in ("own", "last", "own_p90", "last_own"))
        cells = f" {own:.1f} | {last} |" if own is not None else " | |"
        return cells + (f" {p90:.1f} | {last_own:.1f} |" if p90 is not None else " | |")

    lines += [f"| {r['stage']} | {r['start']:.1f} | {r['work']:.1f} | {r['sync']:.1f} | {r['span']:.1f} |{extra(r)}"
              if r["span"] is not None else f"| {r['stage']} | not stamped | | | | | | | |" for r in rows]
    total = sum(r["span"] for r in rows_run)
    lines.append(f"| total | | {sum(r['work'] for r in rows_run):.1f} | {sum(r['sync'] for r in rows_run):.1f} | "
                 f"{total:.1f} | | | | |")
    return "\n".join(lines)
