"""Goodput while the job runs: ``trainmon/goodput`` and its badput parts at each window's end.

Computed on the pipeline thread from what it already has (each window's step time and data
wait, the checkpoint and evaluation spans), nothing on the training thread. The split follows
``trainmon goodput``'s rules for one attempt: the clock starts with the process (or its
launcher, or ``trainmon.mark_start``); before the first step is start-up; each window's time
since the previous window's end is its steps', less the spans inside it (checkpoint save or
load, evaluation), the steps' data wait and their time between steps (less those spans, as
``trainmon goodput`` counts it). Two views: the attempt so far, and a rolling
window of the last ``window_s`` seconds (a gauge to alert on: "below 80 % over the last
hour"). Values are fractions of the wall time (0.912 is 91.2 %).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import SPAN_KINDS, Extra, Number, Span
from trainmon.core.observer import Observer

GOODPUT_METRIC = "trainmon/goodput"
GOODPUT_WINDOW_METRIC = "trainmon/goodput_window"
#: ``trainmon/badput/<part>`` and ``trainmon/badput_window/<part>``: shares of the wall time.
BADPUT_PREFIX = "trainmon/badput/"
BADPUT_WINDOW_PREFIX = "trainmon/badput_window/"
PARTS = (
    "startup",
    "checkpoint_save",
    "checkpoint_load",
    "eval",
    "data_wait",
    "between_steps",
    "other",
)
_STEP_MS = "perf/step_time_ms"
_DATA_MS = "perf/data_ms"
_BETWEEN_MS = "perf/between_steps_ms"


class LiveGoodput(Observer):
    """The live goodput of this process's attempt, added to every window (see the module)."""

    def __init__(self, start: float, window_s: float = 3600.0) -> None:
        self.start = start
        self.window_s = window_s
        self.totals = dict.fromkeys(("productive", *PARTS), 0.0)
        self._reached: float | None = None  # the wall time split so far ends here
        self._spans: list[tuple[str, float, float]] = []
        # (begin, end, seconds by part) of each split interval, for the rolling window
        self._recent: deque[tuple[float, float, dict[str, float]]] = deque()

    def on_extra(self, record: Extra) -> None:
        """Checkpoint and evaluation spans: their time is theirs wherever it falls."""
        if isinstance(record, Span) and record.end_time > record.start_time:
            part = record.kind if record.kind in SPAN_KINDS else "other"  # parts named alike
            self._spans.append((part, record.start_time, record.end_time))

    def enrich(self, window: WindowStats) -> Mapping[str, Number] | None:
        """Split the time up to this window's end; the metrics of both views."""
        end = window.end_time
        if not math.isfinite(end):
            return None
        if self._reached is None:
            first_step_s = _mean(window, _STEP_MS) / 1e3
            begin = max(self.start, min(window.start_time - first_step_s, end))
            self._book(self.start, begin, {"startup": begin - self.start})
            self._reached = begin
        low = self._reached
        if end <= low:
            return self._metrics(end)
        split = dict.fromkeys(("productive", *PARTS), 0.0)
        left = end - low
        kept: list[tuple[str, float, float]] = []
        for part, a, b in self._spans:
            overlap = min(b, end) - max(a, low)
            if overlap > 0:
                split[part] += min(overlap, left)
                left -= min(overlap, left)
            if b > end:
                kept.append((part, a, b))
        self._spans = kept
        spanned = (end - low) - left
        data = min(left, _sum(window, _DATA_MS) / 1e3)
        left -= data
        # the gap after step() holds the user's own timed spans: counted once, as theirs
        between = min(left, max(0.0, _sum(window, _BETWEEN_MS) / 1e3 - spanned))
        split["data_wait"] += data
        split["between_steps"] += between
        split["productive"] += left - between
        self._book(low, end, split)
        self._reached = end
        return self._metrics(end)

    def _book(self, low: float, high: float, split: dict[str, float]) -> None:
        for part, seconds in split.items():
            self.totals[part] += seconds
        self._recent.append((low, high, split))

    def _metrics(self, now: float) -> dict[str, Number]:
        wall = now - self.start
        if wall <= 0:
            return {}
        out: dict[str, Number] = {GOODPUT_METRIC: self.totals["productive"] / wall}
        out.update((BADPUT_PREFIX + part, self.totals[part] / wall) for part in PARTS)
        if self.window_s > 0:
            since = now - self.window_s
            while self._recent and self._recent[0][1] <= since:
                self._recent.popleft()
            recent = dict.fromkeys(("productive", *PARTS), 0.0)
            for low, high, split in self._recent:
                share = 1.0 if low >= since else (high - since) / (high - low)
                for part, seconds in split.items():
                    recent[part] += seconds * share
            span = min(wall, self.window_s)
            out[GOODPUT_WINDOW_METRIC] = recent["productive"] / span
            out.update((BADPUT_WINDOW_PREFIX + part, recent[part] / span) for part in PARTS)
        return out


def _mean(window: WindowStats, name: str) -> float:
    stats = window.metrics.get(name)
    return stats.mean if stats is not None and math.isfinite(stats.mean) else 0.0


def _sum(window: WindowStats, name: str) -> float:
    stats = window.metrics.get(name)
    if stats is None or not math.isfinite(stats.mean):
        return 0.0
    return stats.mean * stats.count
