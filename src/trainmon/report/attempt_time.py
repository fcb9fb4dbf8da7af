"""Where an attempt's seconds went, piece by piece along wall time: the one rule that
``trainmon goodput`` adds up (:mod:`trainmon.report.goodput`) and ``--timeline`` draws
(:mod:`trainmon.report.timeline`).

An attempt's time is cut at its step ends (a step runs from the previous step's end; the first
one from its end less its ``perf/step_time_ms``): before the first step is start-up; a step is
lost work when a later attempt redid it, else its ``perf/between_steps_ms`` and ``perf/data_ms``
parts, then productive time, and in a step during which a stall alert fired what it took
beyond the attempt's median step is stall; checkpoint and evaluation spans are theirs wherever
they fall (where two overlap, the earlier keeps the shared time); after the last step is
other (stall when a stall alert fired there).
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Iterator

from trainmon.report.attempts import Attempt

#: The category of each kind of journal ``span``.
SPAN_CATEGORY = {
    "checkpoint_save": "checkpoint_save_s",
    "checkpoint_load": "checkpoint_load_s",
    "eval": "eval_s",
}


def attempt_pieces(attempt: Attempt) -> Iterator[tuple[str, float, float]]:
    """One attempt's time from its start to its finish as ``(category, low, high)`` pieces in
    time order (the rules are the module's): within a kept step its time between steps and data
    wait first, then the productive part, then the stall beyond the attempt's median step."""
    start, finish = attempt.start, attempt.finish
    spans: list[tuple[str, float, float]] = []  # disjoint, as _split makes them
    reach = start
    for kind, a, b in sorted(attempt.spans, key=lambda span: span[1]):
        a, b = max(a, reach), min(b, finish)
        if b > a:
            spans.append((SPAN_CATEGORY.get(kind, "other_s"), a, b))
            reach = b
    cut = _Cutter(spans)
    marks = attempt.steps
    if not len(marks):
        yield from cut.fill(start, finish, [("startup_s", None)])
        return
    first = marks[0]
    begin = first.time - (first.step_s or 0.0)
    begin = min(max(begin, start), first.time)
    yield from cut.fill(start, begin, [("startup_s", None)])
    durations = array("d")
    previous = begin
    for t in marks.times:
        end = max(t, previous)
        durations.append(end - previous)
        previous = end
    typical = statistics.median(durations) if durations else 0.0
    stalls = attempt.stall_times
    high = begin
    columns = zip(marks.steps, marks.times, marks.data_s, marks.between_s, strict=True)
    for step, t, data_s, between_s in columns:
        low, high = high, max(t, high)
        if high <= low:
            continue
        clear = cut.clear(low, high)  # no span in the step: the usual case, laid out here
        if step >= attempt.redone_from:
            if clear:
                yield "lost_work_s", low, high
            else:
                yield from cut.fill(low, high, [("lost_work_s", None)])
            continue
        left = high - low if clear else cut.left(low, high)
        data = min(data_s, left)
        left -= data
        between = min(max(0.0, between_s - ((high - low) - left - data)), left)
        left -= between
        stall = 0.0
        if stalls and any(low < s <= high for s in stalls):
            stall = max(0.0, left - typical)
        if not clear:
            plan: list[tuple[str, float | None]] = [
                ("between_steps_s", between),
                ("data_wait_s", data),
                ("productive_s", None),
                ("stall_s", stall),
            ]
            yield from cut.fill(low, high, plan)
            continue
        if between > 0:
            yield "between_steps_s", low, low + between
            low += between
        if data > 0:
            yield "data_wait_s", low, low + data
            low += data
        if stall > 0:
            yield "productive_s", low, max(low, high - stall)
            yield "stall_s", max(low, high - stall), high
        else:
            yield "productive_s", low, high
    tail = "stall_s" if any(previous < s for s in stalls) else "other_s"
    yield from cut.fill(previous, finish, [(tail, None)])


class _Cutter:
    """Cuts intervals, in time order, around an attempt's (disjoint, sorted) spans."""

    def __init__(self, spans: list[tuple[str, float, float]]) -> None:
        self.spans = spans
        self.next = 0  # the first span that may reach past the current interval's start

    def _advance(self, low: float) -> int:
        """Skip the spans that end by ``low`` (the intervals come in time order)."""
        spans, i = self.spans, self.next
        while i < len(spans) and spans[i][2] <= low:
            i += 1
        self.next = i
        return i

    def _overlapping(self, low: float, high: float) -> list[tuple[str, float, float]]:
        spans, i = self.spans, self._advance(low)
        found = []
        while i < len(spans) and spans[i][1] < high:
            category, a, b = spans[i]
            a, b = max(a, low), min(b, high)
            if b > a:
                found.append((category, a, b))
            i += 1
        return found

    def clear(self, low: float, high: float) -> bool:
        """Whether no span reaches into [low, high]."""
        i = self._advance(low)
        return i == len(self.spans) or self.spans[i][1] >= high

    def left(self, low: float, high: float) -> float:
        """What of [low, high] no span covers."""
        if high <= low:
            return 0.0
        covered = sum(b - a for _, a, b in self._overlapping(low, high))
        return max(0.0, high - low - covered)

    def fill(
        self, low: float, high: float, plan: list[tuple[str, float | None]]
    ) -> Iterator[tuple[str, float, float]]:
        """[low, high] in time order: the spans in it as themselves, the rest shared by
        ``plan``'s categories in turn (see :func:`_share`)."""
        if high <= low:
            return
        spans = self._overlapping(low, high)
        gaps: list[tuple[float, float]] = []
        t = low
        for _, a, b in spans:
            if a > t:
                gaps.append((t, a))
            t = b
        if t < high:
            gaps.append((t, high))
        yield from sorted([*spans, *_share(gaps, plan)], key=lambda piece: piece[1])


def _share(
    gaps: list[tuple[float, float]], plan: list[tuple[str, float | None]]
) -> Iterator[tuple[str, float, float]]:
    """Lay ``plan``'s seconds along the gaps in its order (None: what the others leave)."""
    total = sum(b - a for a, b in gaps)
    fixed = sum(seconds for _, seconds in plan if seconds is not None)
    queue = [(c, max(0.0, total - fixed) if s is None else s) for c, s in plan]
    queue = [(c, s) for c, s in queue if s > 0]
    last = queue[-1][0] if queue else next(c for c, s in plan if s is None)
    for low, high in gaps:
        t = low
        while queue and t < high:
            category, seconds = queue[0]
            end = min(high, t + seconds)
            yield category, t, end
            remaining = seconds - (end - t)
            if end < high or remaining <= 0:
                queue.pop(0)
            else:
                queue[0] = (category, remaining)
            t = end
        if t < high:  # rounding: the last category's
            yield last, t, high
