"""When each step of a run was logged: the report's "wall time" x axis.

A :class:`StepClock` holds one time per distinct x (step, or samples for DeepSpeed's
``Train/Samples/*`` tags): the time of the first record that logged it. Every series of a run
is logged at those x, so one packed column pair (8 bytes a step in a ``StepColumn``, 8 a time in
a ``FloatColumn``) gives every point of every series its time, instead of a time column per
series or a time object per point: a journal of ten metrics per step grows by under 2 bytes a
value. Readers fill it as they read (:meth:`StepClock.add`, one comparison per record);
:func:`wall_axis` turns it into what the page draws with: per x, seconds since the run began,
down-sampled keeping the longest pause inside each bucket (a restart's downtime stays a jump).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from trainmon.report.columns import FloatColumn, StepColumn


class StepClock:
    """Steps (ascending, unique once :meth:`settle`-d) and the time each was first logged."""

    __slots__ = ("_cache", "ordered", "steps", "times", "unit")

    def __init__(self, unit: str = "step") -> None:
        self.steps = StepColumn()
        self.times = FloatColumn()
        self.unit = unit
        """The x the steps count: ``"step"``, or ``"samples"`` for DeepSpeed's tags."""
        self.ordered = True
        """False once a step came after a later one (sorted by :meth:`settle`)."""
        self._cache: tuple[tuple[int, int], dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: int, time: float) -> None:
        """Note that ``step`` was logged at ``time`` (a step already noted keeps its time)."""
        steps = self.steps
        if steps:
            last = steps[-1]
            if step == last:
                return
            if step < last:
                self.ordered = False
        steps.append(step)
        self.times.append(time)

    def extend(self, pairs: Iterable[tuple[int, float]]) -> None:
        """:meth:`add` each ``(step, time)``."""
        for step, time in pairs:
            self.add(step, time)

    def drop_from(self, step: int) -> None:
        """Forget ``step`` and every later step (TensorBoard's purge after a restart)."""
        if not any(s >= step for s in self.steps):
            return
        pairs = [(s, t) for s, t in zip(self.steps, self.times, strict=True) if s < step]
        self.steps = StepColumn(s for s, _ in pairs)
        self.times = FloatColumn(t for _, t in pairs)
        self._cache = None

    def settle(self) -> StepClock:
        """Steps ascending and unique: a step logged again later keeps its latest time (as
        the values of a step logged again keep their latest); returns the clock."""
        if self.ordered:
            return self
        latest = dict(zip(self.steps, self.times, strict=True))
        ordered = sorted(latest)
        self.steps = StepColumn(ordered)
        self.times = FloatColumn(latest[s] for s in ordered)
        self.ordered = True
        self._cache = None
        return self

    def origin(self, start: float | None) -> float:
        """Where a wall axis counts from: the run's ``start``, else (none, or later than the
        clock's first time) the clock's first time. The clock must not be empty."""
        first = self.times[0]
        return start if start is not None and start <= first else first

    def tail(self, after: int, start: float | None) -> dict[str, Any]:
        """The points of :func:`wall_axis` past step ``after``, every one of them (for a live
        page that has the axis up to ``after``)."""
        clock = self.settle()
        at = bisect.bisect_right(clock.steps, after)
        origin = clock.origin(start)
        return {
            "x": list(clock.steps[at:]),
            "y": [round(t - origin, 6) for t in clock.times[at:]],
            "unit": clock.unit,
            "tail": True,
        }

    def axis(self, buckets: int, start: float | None = None) -> dict[str, Any] | None:
        """See :func:`wall_axis` (computed once per length and bucket count)."""
        key = (len(self.steps), buckets)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        found = _axis(self.settle(), buckets, start)
        if found is not None:
            self._cache = (key, found)
        return found


def wall_axis(
    clock: StepClock | None, buckets: int, start: float | None = None
) -> dict[str, Any] | None:
    """``{"x": steps, "y": seconds since start, "unit": "step"|"samples"}`` for the page to
    draw step charts over wall time (it interpolates between points); None without a clock or
    with times that go back. ``start``: the run's start (default: the clock's first time).

    A long clock keeps, per bucket, its first point and the two points around its longest
    pause, so a pause (a restart's downtime, a stalled job) stays a jump, not a slope."""
    if clock is None or not len(clock):
        return None
    return clock.axis(buckets, start)


def _axis(clock: StepClock, buckets: int, start: float | None) -> dict[str, Any] | None:
    steps, times = clock.steps, clock.times
    n = len(steps)
    if n > 1 and not all(map(operator.le, times, times[1:])):
        return None  # a clock that went back: no honest time axis
    origin = clock.origin(start)
    if n <= 2 * buckets:
        picks: Sequence[int] = range(n)
    else:
        keep = [0]
        for b in range(buckets):
            lo = b * n // buckets
            hi = min((b + 1) * n // buckets + 1, n)  # the pause into the next bucket too
            keep.append(lo)
            if hi - lo > 1:
                gaps = list(map(operator.sub, times[lo + 1 : hi], times[lo : hi - 1]))
                i = lo + gaps.index(max(gaps))
                keep += (i, i + 1)
        keep.append(n - 1)
        picks = sorted(set(keep))
    return {
        "x": [steps[i] for i in picks],
        "y": [round(times[i] - origin, 6) for i in picks],
        "unit": clock.unit,
    }
