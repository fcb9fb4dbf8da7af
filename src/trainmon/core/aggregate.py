"""Per-window statistics of every metric: count, mean, min, max and last.

A window covers the steps ``((k-1)·N, k·N]`` for ``N = window_steps`` (so with
``steps_per_print = 50`` the windows end at steps 50, 100, ...), or a span of wall time when
``window_seconds`` is set. A window is closed when a record of a later window arrives, when
the background thread finds it idle on its last step, or when the monitor closes.

``mean`` is NaN (or ±Inf) when any value in the window was; ``min`` and ``max`` are taken over
the finite values only (they are the last value when none was finite).

For a rate metric (:func:`is_rate`: samples, tokens, TFLOPS, MFU, any ``*_per_sec``) ``mean`` is
the window's rate, work over elapsed time: each value weighted by the ``perf/step_time_ms``
logged at the same step, ``Σ(rate·time) / Σtime``. Values at steps without a (finite, positive)
step time are left out of that; a window where no value has one keeps the plain mean. ``min``,
``max`` and ``last`` stay per-step values. (Steps of 10 ms and 190 ms at 16 samples each run at
160 samples/s, not at the 842 that the mean of 1,600 and 84 would say.) The cross-rank job rate
and the report's run figures weight rates the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter, truediv

from trainmon.core.events import Number, StepScalars

#: The time of one step, which every per-step rate is measured over.
STEP_TIME_METRIC = "perf/step_time_ms"
#: The per-step rates trainmon logs (work of one step over its ``perf/step_time_ms``), plus the
#: job's cross-rank rates. Any other metric whose name ends in :data:`RATE_SUFFIX` (your own
#: ``perf/images_per_sec``) is a rate too.
RATE_METRICS = frozenset(
    {
        "perf/samples_per_sec",
        "perf/tokens_per_sec",
        "perf/tflops",
        "perf/mfu",
        "perf/job_samples_per_sec",
        "perf/job_tokens_per_sec",
    }
)
RATE_SUFFIX = "_per_sec"


def is_rate(name: str) -> bool:
    """True for a rate metric: over a span its value is work over time (see the module doc),
    never the plain mean of per-step rates."""
    return name in RATE_METRICS or name.endswith(RATE_SUFFIX)


@dataclass(slots=True)
class MetricStats:
    """One metric over one window (read-only by convention: built per metric at every window's
    close, where a frozen dataclass's ``__init__`` costs four times as much)."""

    count: int
    mean: float
    """The plain mean; for a rate metric the window's work over time (see the module doc)."""
    min: Number
    max: Number
    last: Number


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Every metric's statistics over one window of steps."""

    first_step: int
    last_step: int
    start_time: float
    end_time: float
    metrics: Mapping[str, MetricStats]

    def means(self) -> StepScalars:
        """The window as one record of means at its last step (for ``every: window`` writers)."""
        return StepScalars(
            self.last_step, self.end_time, {name: s.mean for name, s in self.metrics.items()}
        )


#: Records kept before their values are folded into partial summaries: bounds the memory of a
#: long (time-based) window.
_FOLD_AT = 1024


class _Partial:
    """count/total/min/max/last of the values folded so far (kept off the public surface)."""

    __slots__ = ("count", "last", "max", "min", "total")

    def __init__(self, values: Sequence[Number]) -> None:
        self.count = len(values)
        self.total = sum(values)
        self.last = values[-1]
        if self.total - self.total == 0:  # every value finite: min/max in C
            self.min, self.max = min(values), max(values)
        else:  # NaN/Inf count and poison the mean, but stay out of min/max
            finite = [v for v in values if v - v == 0]
            self.min = min(finite) if finite else math.inf
            self.max = max(finite) if finite else -math.inf

    def merge(self, later: _Partial) -> None:
        self.count += later.count
        self.total += later.total
        self.last = later.last
        self.min = min(self.min, later.min)
        self.max = max(self.max, later.max)

    def freeze(self, weighted: list[float] | None = None) -> MetricStats:
        finite = self.min <= self.max
        mean = self.total / self.count
        if weighted is not None and weighted[1] > 0 and mean - mean == 0:
            mean = weighted[0] / weighted[1]  # a rate: Σ(rate·time) / Σtime
        return MetricStats(
            self.count,
            mean,
            self.min if finite else self.last,
            self.max if finite else self.last,
            self.last,
        )


class WindowAggregator:
    """Folds per-step records into windows; returns each window once it is complete."""

    def __init__(self, window_steps: int, window_seconds: float | None = None) -> None:
        self.window_steps = window_steps
        self.window_seconds = window_seconds
        self._window_id: int | None = None
        # the window's records, as runs of records with the same names in the same order
        self._runs: list[tuple[tuple[str, ...], list[Mapping[str, Number]]]] = []
        self._run: list[Mapping[str, Number]] = []
        self._run_names: tuple[str, ...] | None = None
        self._kept = 0  # records in the runs
        self._order: dict[str, None] = {}  # the window's names, first seen first
        self._folded: dict[str, _Partial] = {}
        # rate metrics: [Σ rate·step_time, Σ step_time] of this window, and every rate name seen
        self._weighted: dict[str, list[float]] = {}
        self._is_rate: dict[str, bool] = {}
        self._rates: tuple[str, ...] = ()
        self._timed_step: int | None = None
        self._step_time = 0.0
        self._first_step = 0
        self._last_step = 0
        self._start_time = 0.0
        self._end_time = 0.0
        self._closed_step: int | None = None

    def _id_of(self, record: StepScalars) -> int:
        if self.window_seconds is not None:
            if self._window_id is None:
                return 0
            elapsed = record.wall_time - self._start_time
            return self._window_id + (1 if elapsed >= self.window_seconds else 0)
        if self._window_id is None and record.step == self._closed_step:
            return -(-record.step // self.window_steps) + 1  # late values of a closed window's step
        return -(-record.step // self.window_steps)

    def add(self, records: Sequence[StepScalars]) -> list[WindowStats]:
        """Account ``records``; return the windows they completed, in order. A record is kept
        whole (its values are read at the window's close, column by column: a loop logs the
        same names each step, so a run of records is transposed in C, not read value by
        value in Python); records must not change once handed over."""
        return [window for _, window in self.add_marking(records)]

    def add_marking(self, records: Sequence[StepScalars]) -> list[tuple[int, WindowStats]]:
        """:meth:`add`, with each completed window's place: ``(i, window)`` when
        ``records[i]`` was the first record after it (so a caller can write the records up
        to ``i``, then the window, then the rest)."""
        done: list[tuple[int, WindowStats]] = []
        for index, record in enumerate(records):
            window_id = self._id_of(record)
            if self._window_id is not None and window_id != self._window_id:
                done.append((index, self._close()))
            if self._window_id is None:
                self._window_id = window_id
                self._first_step = record.step
                self._start_time = record.wall_time
            self._last_step = record.step
            self._end_time = record.wall_time
            values_of = record.values
            time_ms = values_of.get(STEP_TIME_METRIC)
            if time_ms is not None:  # kept for rates logged apart at the same step
                self._timed_step, self._step_time = record.step, time_ms
            names = tuple(values_of)
            if names != self._run_names:
                self._start_run(names)
            self._run.append(values_of)
            self._kept += 1
            if self._rates:
                self._weigh(record, time_ms)
            if self._kept >= _FOLD_AT:
                self._fold()
        return done

    def _start_run(self, names: tuple[str, ...]) -> None:
        """A record with other names (or another order) than the one before starts a run."""
        self._run_names = names
        self._run = []
        self._runs.append((names, self._run))
        for name in names:
            if name not in self._order:
                self._order[name] = None
                if name not in self._is_rate:
                    self._learn(name)

    def _learn(self, name: str) -> None:
        """Note once per name whether it is a rate (to be weighted by the step time)."""
        rate = is_rate(name)
        self._is_rate[name] = rate
        if rate:
            self._rates = (*self._rates, name)

    def _weigh(self, record: StepScalars, time_ms: Number | None) -> None:
        """Add the record's rates, times the step time of the same step, to the window's sums."""
        values = record.values
        if time_ms is None:
            if record.step != self._timed_step:
                return
            time_ms = self._step_time  # rates logged apart from the step time
        if not 0 < time_ms < math.inf:
            return
        weighted = self._weighted
        for name in self._rates:
            rate = values.get(name)
            if rate is not None:
                sums = weighted.get(name)
                if sums is None:
                    weighted[name] = [rate * time_ms, time_ms]
                else:
                    sums[0] += rate * time_ms
                    sums[1] += time_ms

    def _columns(self) -> dict[str, Sequence[Number]]:
        """The values kept so far, name by name, in the order they came."""
        columns: dict[str, Sequence[Number]] = {}
        for names, run in self._runs:
            values = zip(*[record.values() for record in run], strict=True)  # transposed in C
            for name, column in zip(names, values, strict=True):
                earlier = columns.get(name)
                if earlier is None:
                    columns[name] = column
                elif type(earlier) is list:  # the name in more than one run: joined in order
                    earlier.extend(column)
                else:
                    columns[name] = [*earlier, *column]
        return columns

    def _fold(self) -> None:
        """Fold the kept values into partial summaries: bounds a long window's memory."""
        folded = self._folded
        for name, column in self._columns().items():
            partial = _Partial(column)
            earlier = folded.get(name)
            if earlier is None:
                folded[name] = partial
            else:
                earlier.merge(partial)
        self._runs = []
        self._run_names = None
        self._kept = 0

    def close_if_complete(self, now: float) -> WindowStats | None:
        """Close the open window when it has reached its last step (or its time is up)."""
        if self._window_id is None:
            return None
        if self.window_seconds is not None:
            if now - self._start_time >= self.window_seconds:
                return self._close()
            return None
        # late values of the step that closed the previous window wait for the next steps
        if self._last_step % self.window_steps == 0 and self._last_step != self._closed_step:
            return self._close()
        return None

    def close(self) -> WindowStats | None:
        """Close the open (possibly partial) window, at shutdown."""
        return self._close() if self._window_id is not None else None

    def _close(self) -> WindowStats:
        weighted = self._weighted
        metrics = None if self._folded else _stats_of(self._columns(), weighted)
        if metrics is None:  # a long window, or a value that is not finite
            if self._runs:
                self._fold()
            folded = self._folded
            metrics = {
                name: folded[name].freeze(weighted.get(name))
                for name in self._order  # first-seen order
                if name in folded
            }
        stats = WindowStats(
            self._first_step, self._last_step, self._start_time, self._end_time, metrics
        )
        self._runs = []
        self._run_names = None
        self._kept = 0
        self._order = {}
        self._folded = {}
        self._weighted = {}
        self._window_id = None
        self._closed_step = self._last_step
        return stats


_last = itemgetter(-1)


def _stats_of(
    columns: dict[str, Sequence[Number]], weighted: dict[str, list[float]]
) -> dict[str, MetricStats] | None:
    """Every metric's statistics from its values, each statistic one C call per metric; None
    when a value is not finite (:class:`_Partial` keeps those out of min and max)."""
    values = list(columns.values())
    totals = list(map(sum, values))
    grand = sum(totals)
    if grand - grand != 0:  # NaN or ±Inf somewhere (or totals beyond a double)
        return None
    counts = list(map(len, values))
    means = list(map(truediv, totals, counts))
    names = list(columns)
    for name, (work, elapsed) in weighted.items():  # rates: work over time
        if elapsed > 0 and name in columns:
            means[names.index(name)] = work / elapsed
    return dict(
        zip(
            names,
            map(MetricStats, counts, means, map(min, values), map(max, values), map(_last, values)),
            strict=True,
        )
    )
