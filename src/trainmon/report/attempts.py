"""A job folder's journal read as attempts: one per process that wrote it, restarts included.

Large jobs are killed, preempted and resumed into the same folder; each process appends its
own ``meta`` line, so the journal holds every attempt. This module reads them back in order,
with what each one logged (including the steps a later attempt redid, which
:func:`~trainmon.journal.read_journal` hides), its checkpoint and evaluation spans, its last
sign of life and how it ended. Each step is kept once: the latest attempt's run of it.
``trainmon goodput``, ``tail``, ``summary`` and ``report`` build on it.
"""

from __future__ import annotations

import math
import operator
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, pairwise
from pathlib import Path
from typing import Any, overload

from trainmon.core.alert import ALERTS_FILE
from trainmon.journal import JOURNAL_FILE, ClockMend, read_journal
from trainmon.report.loading import find_journal, parse_alert_lines
from trainmon.report.model import RunError

#: The metric whose value is a step's data wait (the breakdown's data part: waits inside a
#: data loader the driver sees).
DATA_METRIC = "perf/data_ms"
#: The metric whose value is a step's time from ``step()`` to the next forward outside any
#: loader trainmon saw (the engine's and ``attach``'s breakdown).
BETWEEN_METRIC = "perf/between_steps_ms"
STEP_TIME_METRIC = "perf/step_time_ms"


@dataclass
class StepMark:
    """One step as an attempt logged it: when it ended, and what it says of its own time."""

    step: int
    time: float
    step_s: float | None = None
    data_s: float = 0.0
    between_s: float = 0.0


class StepMarks(Sequence[StepMark]):
    """An attempt's steps in five packed columns (40 bytes a step, where a :class:`StepMark`
    object each would take ten times that on a journal of millions of steps); read as a
    sequence of :class:`StepMark` made on the fly.

    Reading appends one row per ``scalars`` line (:meth:`add`); :meth:`settle` then sorts
    them by step and merges the rows of one step (its own metrics' line gives its end).
    """

    def __init__(self) -> None:
        self.steps = array("q")
        self.times = array("d")
        self.step_s = array("d")  # NaN: the step said nothing of its own time
        self.data_s = array("d")  # NaN: nothing on this row
        self.between_s = array("d")  # NaN: nothing on this row

    def add(
        self, step: int, time: float, step_s: float, data_s: float, between_s: float = math.nan
    ) -> None:
        """One line's row (``step_s``/``data_s``/``between_s`` NaN when the line does not
        carry them)."""
        self.steps.append(step)
        self.times.append(time)
        self.step_s.append(step_s)
        self.data_s.append(data_s)
        self.between_s.append(between_s)

    def settle(self) -> None:
        """Sort by step (stable) and merge the rows of each step into one."""
        steps, times, step_s, data_s = self.steps, self.times, self.step_s, self.data_s
        between_s = self.between_s
        ordered = all(map(operator.lt, steps, islice(steps, 1, None)))
        if ordered:
            _zero_nan(data_s)
            _zero_nan(between_s)
            return
        order = sorted(range(len(steps)), key=steps.__getitem__)
        merged = StepMarks()
        for i in order:
            step = steps[i]
            if merged.steps and merged.steps[-1] == step:
                if step_s[i] == step_s[i]:  # the line of the step's own metrics: its end
                    merged.times[-1] = times[i]
                    merged.step_s[-1] = step_s[i]
                if data_s[i] == data_s[i]:
                    merged.data_s[-1] = data_s[i]
                if between_s[i] == between_s[i]:
                    merged.between_s[-1] = between_s[i]
            else:
                merged.add(step, times[i], step_s[i], data_s[i], between_s[i])
        _zero_nan(merged.data_s)
        _zero_nan(merged.between_s)
        self.steps, self.times, self.step_s = merged.steps, merged.times, merged.step_s
        self.data_s, self.between_s = merged.data_s, merged.between_s

    def __len__(self) -> int:
        return len(self.steps)

    @overload
    def __getitem__(self, index: int) -> StepMark: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepMark]: ...

    def __getitem__(self, index: int | slice) -> StepMark | list[StepMark]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        step_s = self.step_s[index]
        return StepMark(
            self.steps[index],
            self.times[index],
            None if step_s != step_s else step_s,
            self.data_s[index],
            self.between_s[index],
        )

    def __iter__(self) -> Iterator[StepMark]:
        for i in range(len(self.steps)):
            yield self[i]


@dataclass
class Attempt:
    """One process's run in the job folder (from its ``meta`` line to the next one's)."""

    index: int
    id: str
    start: float
    last_seen: float
    end_time: float | None = None
    status: str | None = None
    stop_reason: str | None = None
    resume_step: int | None = None
    steps: StepMarks = field(default_factory=StepMarks)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    stall_times: list[float] = field(default_factory=list)
    #: Steps at or past this one were redone by a later attempt (inf: none were).
    redone_from: float = math.inf
    #: The step of this attempt's first ``scalars`` line (None before it logged one).
    first_logged: int | None = None
    #: When its Monitor was created (its ``meta`` line); :attr:`start` is its process's start.
    monitor_start: float = 0.0

    @property
    def finish(self) -> float:
        """The end of this attempt: its ``end`` record, else its last sign of life."""
        return max(self.end_time or self.last_seen, self.last_seen)

    @property
    def ended(self) -> str:
        """``closed``, ``failed``, ``aborted``, ``stopped by a rule`` or ``killed`` (no end)."""
        if self.status is None:
            return "killed"
        if self.stop_reason:
            return "stopped by a rule"
        return {"success": "closed"}.get(self.status, self.status)

    @property
    def first_step(self) -> float:
        """The step this attempt started at: its resume point, else its first logged step
        (the rule of :class:`~trainmon.journal.Timeline`, which every reader follows)."""
        if self.resume_step is not None:
            return self.resume_step
        return math.inf if self.first_logged is None else self.first_logged

    @property
    def kept(self) -> list[StepMark]:
        """The steps of this attempt that no later attempt redid."""
        return [s for s in self.steps if s.step < self.redone_from]

    @property
    def redone(self) -> list[StepMark]:
        """The steps a later attempt redid: this attempt's time on them was lost."""
        return [s for s in self.steps if s.step >= self.redone_from]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``goodput --json`` lists per attempt (its split added there)."""
        steps = self.steps.steps
        redone = [s for s in steps if s >= self.redone_from]
        return {
            "index": self.index,
            "id": self.id,
            "start": self.start,
            "end": self.finish,
            "ended": self.ended,
            "stop_reason": self.stop_reason,
            "resumed_from_step": None if self.resume_step is None else self.resume_step - 1,
            "first_step": min(steps) if steps else None,
            "last_step": max(steps) if steps else None,
            "steps": len(steps),
            "redone_steps": len(redone),
        }


@dataclass
class Restart:
    """Where attempt ``index`` took over: the step it resumed from and what it replaced."""

    index: int
    time: float
    resumed_from: int | None
    replaced: tuple[int, int] | None

    def describe(self) -> str:
        """``resumed from step 20 · steps 21–30 of the previous attempt replaced``."""
        where = (
            "restarted from scratch"
            if self.resumed_from is None
            else f"resumed from step {self.resumed_from}"
        )
        if self.replaced is None:
            return f"{where} · nothing of the previous attempt replaced"
        low, high = self.replaced
        steps = f"step {low}" if low == high else f"steps {low}–{high}"
        return f"{where} · {steps} of the previous attempt replaced"


def journal_file(path: str | os.PathLike[str]) -> Path:
    """The journal of a job folder as every reader finds it (rank 0's under
    ``per_rank_output``), or the file itself; :class:`RunError` naming what is there else."""
    journal, _ = find_journal(Path(path))
    if journal is None:
        raise RunError(f"{path}: no trainmon journal ({JOURNAL_FILE}) there")
    return journal


def read_attempts(path: str | os.PathLike[str], notes: list[str] | None = None) -> list[Attempt]:
    """The attempts of a journal, in the order they were written, with redone steps marked.

    Read as a stream; a damaged line is skipped and counted in ``notes`` (as ``summary``
    does), a line cut short by a kill is left out.
    """
    attempts: list[Attempt] = []
    current: Attempt | None = None
    journal = journal_file(path)
    damaged: list[int] = []
    clock = ClockMend()
    for record in read_journal(journal, keep_orphaned=True, damaged=damaged, clock=clock):
        if record.get("kind") == "meta":
            created = _number(record.get("time"))
            current = Attempt(
                index=len(attempts) + 1,
                id=str(record.get("attempt") or f"pid{record.get('pid')}"),
                start=_process_start(record, created),
                last_seen=created,
                monitor_start=created,
            )
            attempts.append(current)
        elif current is not None:  # (lines before any meta: not trainmon's writer)
            _note(current, record)
    if clock.jumps and notes is not None:
        notes.append(clock.describe())
    if damaged and notes is not None:
        notes.append(
            f"skipped {len(damaged)} unreadable line(s) (first: line {damaged[0]} of "
            f"{journal.name})"
        )
    for attempt in attempts:
        attempt.steps.settle()
    for earlier, later in pairwise(attempts):
        # one process's start counts once: a second Monitor of the same process (or a clock
        # that disagrees) starts no earlier than the attempt before it ended
        later.start = min(max(later.start, earlier.finish), later.monitor_start)
    _add_stalls(attempts, journal.parent / ALERTS_FILE)
    _mark_redone(attempts)
    return attempts


def _process_start(meta: dict[str, Any], created: float) -> float:
    """An attempt's start: the earliest of its process's start, its launcher's (a first-round
    ``torchrun`` worker) and its Monitor's creation (see :mod:`trainmon.core.process`)."""
    starts = [created]
    for key in ("process_start", "launcher_start", "job_start"):
        value = meta.get(key)
        if isinstance(value, int | float) and math.isfinite(value) and value <= created:
            starts.append(float(value))
    return min(starts)


def _add_stalls(attempts: list[Attempt], alerts: Path) -> None:
    """Firing times of ``stall`` alerts from ``alerts.jsonl`` (the file sink), each given to
    the attempt it fell in (rules of any name; ``alerts/<name>`` edges need "stall" in it)."""
    try:
        with open(alerts, "rb") as f:
            found = parse_alert_lines(f)
    except OSError:
        return
    for alert in found:
        t = alert.get("time")
        if alert.get("kind") != "stall" or alert.get("state") != "firing":
            continue
        if not isinstance(t, int | float):
            continue
        for attempt in attempts:
            if attempt.start <= t <= attempt.finish and float(t) not in attempt.stall_times:
                attempt.stall_times.append(float(t))


def restarts_of(attempts: Sequence[Attempt]) -> list[Restart]:
    """One :class:`Restart` per attempt after the first."""
    found = []
    for i in range(1, len(attempts)):
        later = attempts[i]
        first = later.first_step
        steps = []  # what stood before this restart (not what an earlier one replaced)
        for j, earlier in enumerate(attempts[:i]):
            until = min((a.first_step for a in attempts[j + 1 : i]), default=math.inf)
            steps += [s for s in earlier.steps.steps if first <= s < until]
        found.append(
            Restart(
                index=later.index,
                time=later.start,
                resumed_from=None if later.resume_step is None else later.resume_step - 1,
                replaced=(min(steps), max(steps)) if steps else None,
            )
        )
    return found


def _note(attempt: Attempt, record: dict[str, Any]) -> None:
    """Add one record of ``attempt``."""
    kind = record.get("kind")
    times = [record.get(key) for key in ("time", "end_time")]
    for t in times:
        if isinstance(t, int | float) and math.isfinite(t):
            attempt.last_seen = max(attempt.last_seen, float(t))
    if kind == "scalars":
        step, t, values = record.get("step"), record.get("time"), record.get("values") or {}
        if type(step) is not int or not isinstance(t, int | float):
            return
        for name, value in values.items():
            if name.startswith("alerts/") and "stall" in name and value == 1:
                attempt.stall_times.append(float(t))
        if attempt.first_logged is None:
            attempt.first_logged = step
        attempt.steps.add(
            step,
            float(t),
            _seconds(values.get(STEP_TIME_METRIC)),
            _seconds(values.get(DATA_METRIC)),
            _seconds(values.get(BETWEEN_METRIC)),
        )
    elif kind == "span":
        start, end = record.get("start_time"), record.get("end_time")
        if isinstance(start, int | float) and isinstance(end, int | float):
            attempt.spans.append((str(record.get("what")), float(start), float(end)))
    elif kind == "resume":
        step = record.get("step")
        if type(step) is int:
            attempt.resume_step = step
    elif kind == "end":
        attempt.end_time = _number(record.get("time"))
        attempt.status = str(record.get("status") or "success")
        reason = record.get("stop_reason")
        attempt.stop_reason = str(reason) if reason else None


def _mark_redone(attempts: list[Attempt]) -> None:
    """Each attempt's steps that a later one redid: from the lowest first step after it."""
    lowest = math.inf
    for attempt in reversed(attempts):
        attempt.redone_from = lowest
        lowest = min(lowest, attempt.first_step)


def _seconds(milliseconds: Any) -> float:
    """A finite millisecond figure as seconds (at least 0); NaN when there is none."""
    if isinstance(milliseconds, int | float) and math.isfinite(milliseconds):
        return max(0.0, milliseconds / 1e3)
    return math.nan


def _zero_nan(column: array[float]) -> None:
    """Nothing said on any row of a step: 0 s."""
    for i, value in enumerate(column):
        if value != value:
            column[i] = 0.0


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
