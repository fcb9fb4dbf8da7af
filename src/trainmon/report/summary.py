"""The figures a user reads first: per-metric statistics and a run's key figures.

Everything here is computed from a :class:`~trainmon.report.model.Run` alone, so the terminal
summary, ``compare`` and the HTML report agree. Statistics skip NaN and ±Inf (counted apart in
``nonfinite``); a metric with no finite value has NaN statistics and is still listed.

The mean of a rate metric (:func:`trainmon.core.aggregate.is_rate`, also its cross-rank
``/min``, ``/mean``, ``/max``) is the run's work over its time: each value weighted by the step
time it covers (:func:`span_rate`), never the plain mean of per-step rates. The step-time
breakdown ends with ``other``: the step time the named parts do not cover, never below 0.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import accumulate, pairwise
from typing import Any

from trainmon.core.aggregate import is_rate
from trainmon.report.agree import step_axis
from trainmon.report.downsample import profile
from trainmon.report.model import (
    BREAKDOWN,
    FAMILIES,
    STEP_TIME,
    Run,
    Series,
    cross_rank_split,
    family,
)
from trainmon.report.restarts import RestartFigures, restart_figures, restart_rows

_NAN = math.nan

#: (label, metric, unit) of the throughput figures, in the order shown.
THROUGHPUT = (
    ("samples/s", "perf/samples_per_sec", "samples/s"),
    ("job samples/s", "perf/job_samples_per_sec", "samples/s"),
    ("tokens/s", "perf/tokens_per_sec", "tokens/s"),
    ("job tokens/s", "perf/job_tokens_per_sec", "tokens/s"),
    ("TFLOPS", "perf/tflops", "TFLOPS"),
    ("MFU", "perf/mfu", ""),
)
#: Memory metrics, most telling first: the headline peak is the first one present.
MEMORY = (
    ("peak device memory", "mem/peak_allocated_mb/max"),
    ("peak device memory", "mem/peak_allocated_mb"),
    ("device memory", "mem/allocated_mb/max"),
    ("device memory", "mem/allocated_mb"),
    ("reserved device memory", "mem/reserved_mb/max"),
    ("reserved device memory", "mem/reserved_mb"),
    ("peak host memory (RSS)", "mem/peak_rss_mb/max"),
    ("peak host memory (RSS)", "mem/peak_rss_mb"),
    ("host memory (RSS)", "mem/rss_mb/max"),
    ("host memory (RSS)", "mem/rss_mb"),
)


@dataclass(frozen=True)
class MetricSummary:
    """One metric over the whole run."""

    name: str
    family: str
    count: int
    nonfinite: int
    """Values that were NaN or ±Inf (kept out of min/max/mean)."""
    first_step: int
    last_step: int
    last: float
    min: float
    max: float
    mean: float


@dataclass(frozen=True)
class Figure:
    """One labelled number of a summary, with the metric it came from."""

    label: str
    metric: str
    value: float
    unit: str = ""


#: The label of the breakdown's last part: step time the named parts do not cover.
OTHER = "other"


@dataclass(frozen=True)
class BreakdownPart:
    """One part of the step: its mean time and its share of the mean step time.

    The part labelled :data:`OTHER` has no metric (``metric`` is empty): it is the mean step
    time minus the named parts' means, never below 0.
    """

    label: str
    metric: str
    mean_ms: float
    percent: float


@dataclass(frozen=True)
class RankSpread:
    """One metric across ranks: window means of the per-window min / mean / max over ranks."""

    metric: str
    min: float
    mean: float
    max: float
    spread_percent: float
    """(max - min) / mean, in percent."""


@dataclass(frozen=True)
class RankFigures:
    """How evenly the ranks worked (from trainmon's cross-rank window metrics)."""

    world_size: int | None
    spreads: list[RankSpread]
    slowest_rank: int | None
    """The rank most often slowest (``perf/slowest_rank``, else the step time's argmax)."""
    slowest_share: float | None
    """The fraction of windows in which it was the slowest."""
    straggler_ratio_mean: float | None
    straggler_ratio_max: float | None


@dataclass(frozen=True)
class AlertFigures:
    """What ``alerts.jsonl`` recorded."""

    fired: int
    resolved: int
    by_rule: dict[str, int]
    """Firing alerts per rule."""
    still_firing: list[str]
    """Rules whose last alert is ``firing``."""
    recent: list[dict[str, Any]]
    """The last alerts, oldest first (at most 20)."""


@dataclass(frozen=True)
class RunSummary:
    """A run's key figures and every metric's statistics."""

    run: str
    path: str
    source: str
    x_unit: str
    steps: int
    first_step: int | None
    last_step: int | None
    duration_s: float | None
    scalars: int
    metrics: list[MetricSummary]
    loss: dict[str, float | str] | None
    """``metric``, ``final``, ``mean``, ``min`` of the training loss."""
    throughput: list[Figure]
    step_time_ms: float | None
    breakdown: list[BreakdownPart]
    breakdown_of: str
    """What the percentages are of: ``perf/step_time_ms``, or the parts' sum without it."""
    memory: list[Figure]
    peak_memory: Figure | None
    ranks: RankFigures | None
    alerts: AlertFigures
    evals: list[Figure] = field(default_factory=list)
    """The last value of each ``eval/`` metric."""
    notes: list[str] = field(default_factory=list)
    restarts: RestartFigures | None = None
    """Restarts, redone work and goodput of a journal restarted into its folder."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN stays NaN: orjson writes it as null)."""
        return asdict(self)

    def metric(self, name: str) -> MetricSummary | None:
        """The statistics of one metric, by its name in the run."""
        return next((m for m in self.metrics if m.name == name), None)


def summarize_series(series: Series) -> MetricSummary:
    """Count, last, and min / max / mean over the finite values."""
    found = profile(series)
    values = series.values
    return MetricSummary(
        name=series.name,
        family=family(series.name),
        count=len(values),
        nonfinite=len(values) - found.finite,
        first_step=series.steps[0],
        last_step=series.steps[-1],
        last=values[-1],
        min=found.low,
        max=found.high,
        mean=found.total / found.finite if found.finite else _NAN,
    )


def other_ms(step_ms: float, parts_ms: Sequence[float]) -> float:
    """The step time the parts do not cover: never below 0, and 0 for rounding noise."""
    other = step_ms - math.fsum(parts_ms)
    return other if other > 1e-9 * abs(step_ms) else 0.0


def _covered_ms(step_time: Series) -> list[float]:
    """Running total of the step time up to each value of ``step_time``.

    A value stands for the steps since the previous value (one per step: itself; one mean per
    window: mean x the window's steps); the first for as many steps as the gap to the second.
    NaN, ±Inf and negative times count as 0.
    """
    steps, values = step_time.steps, step_time.values
    first_gap = steps[1] - steps[0] if len(steps) > 1 else 1
    gaps = [first_gap, *(b - a for a, b in pairwise(steps))]
    covered = [v * g if 0 < v < math.inf else 0.0 for v, g in zip(values, gaps, strict=True)]
    return list(accumulate(covered))


def span_rate(rate: Series, step_time: Series | None) -> float | None:
    """A rate over the whole series: work over time, ``Σ(rate·time) / Σtime``.

    Each rate value is weighted by the step time it covers: the step times logged after the
    rate's previous value up to its own step (a per-step rate: its own step's time; a rate
    per window, like ``perf/job_samples_per_sec``: the window's time). None when no value has
    a step time to weigh it by (then the plain mean is the best there is).
    """
    if step_time is None or not step_time.steps or not rate.steps:
        return None
    steps, values = rate.steps, rate.values
    times = step_time.steps
    if times == steps and steps[-1] - steps[0] == len(steps) - 1:
        weights: Sequence[float] = step_time.values  # one of each per step: the common case
    else:
        total = _covered_ms(step_time)

        def upto(step: int) -> float:
            index = bisect_right(times, step)
            return total[index - 1] if index else 0.0

        before = steps[0] - (steps[1] - steps[0] if len(steps) > 1 else 1)
        ends = [upto(before), *map(upto, steps)]
        weights = [b - a for a, b in pairwise(ends)]
    work = []
    spent = []
    for value, weight in zip(values, weights, strict=True):
        if 0 < weight < math.inf and value - value == 0:
            work.append(value * weight)
            spent.append(weight)
    if not spent:
        return None
    return math.fsum(work) / math.fsum(spent)


def _is_rate_series(name: str) -> bool:
    split = cross_rank_split(name)
    if split is not None:
        return not split[1].startswith("argmax") and is_rate(split[0])
    return is_rate(name)


def summarize(run: Run) -> RunSummary:
    """Every figure the terminal summary and the report show for ``run``."""
    stats = {name: summarize_series(s) for name, s in run.series.items()}
    step_time = run.find(STEP_TIME)
    for name, series in run.series.items():
        if _is_rate_series(name):
            rate = span_rate(series, step_time)
            if rate is not None:
                stats[name] = replace(stats[name], mean=rate)
    order = {f: i for i, f in enumerate(FAMILIES)}
    metrics = sorted(stats.values(), key=lambda m: (order[m.family], m.name))

    def of(metric: str) -> MetricSummary | None:
        series = run.find(metric)
        return None if series is None else stats[series.name]

    loss: dict[str, float | str] | None = None
    found = of("train/loss")
    if found is not None:
        loss = {"metric": found.name, "final": found.last, "mean": found.mean, "min": found.min}
    throughput = [
        Figure(label, m.name, m.mean, unit)
        for label, metric, unit in THROUGHPUT
        if (m := of(metric)) is not None
    ]
    if not throughput and run.x_unit == "samples":
        throughput = _samples_per_second(run, metrics)
    step = of(STEP_TIME)
    parts = [
        (label, stats[part.name])
        for label, metric in BREAKDOWN
        if (part := run.find_part(metric)) is not None
    ]
    base = step.mean if step is not None else math.fsum(m.mean for _, m in parts)
    breakdown = [
        BreakdownPart(label, m.name, m.mean, 100 * m.mean / base if base else _NAN)
        for label, m in parts
    ]
    if step is not None and parts and math.isfinite(base):
        other = other_ms(base, [m.mean for _, m in parts])
        if math.isfinite(other):
            breakdown.append(BreakdownPart(OTHER, "", other, 100 * other / base if base else _NAN))
    memory: list[Figure] = []
    seen: set[str] = set()
    peak: Figure | None = None
    for label, metric in MEMORY:
        m = of(metric)
        if m is None:
            continue
        figure = Figure(label, m.name, m.max, "MB")
        peak = peak or figure
        if metric.removesuffix("/max") not in seen:
            seen.add(metric.removesuffix("/max"))
            memory.append(figure)
    # the range is the training steps': DeepSpeed's Train/Samples/* count samples
    axis = step_axis(run.series)
    on_steps = [m for m in metrics if m.name in axis] or metrics
    first = min((m.first_step for m in on_steps), default=None)
    last = max((m.last_step for m in on_steps), default=None)
    duration = (
        max(0.0, run.end_time - run.start_time)  # never negative, even on a bad clock
        if run.start_time is not None and run.end_time is not None
        else None
    )
    evals = [Figure(m.name, m.name, m.last) for m in metrics if m.family == "eval"]
    evals = [f for f in evals if cross_rank_split(f.metric) is None]
    return RunSummary(
        run=run.name,
        path=str(run.path),
        source=run.source,
        x_unit=run.x_unit,
        steps=run.step_count,
        first_step=first,
        last_step=last,
        duration_s=duration,
        scalars=run.scalar_count,
        metrics=metrics,
        loss=loss,
        throughput=throughput,
        step_time_ms=step.mean if step is not None else None,
        breakdown=breakdown,
        breakdown_of=step.name if step is not None else "the sum of the parts",
        memory=memory,
        peak_memory=peak,
        ranks=_ranks(run, stats),
        alerts=alert_figures(run.alerts),
        evals=evals,
        notes=list(run.notes),
        restarts=restart_figures(run.source, run.path),
    )


def _samples_per_second(run: Run, metrics: list[MetricSummary]) -> list[Figure]:
    """DeepSpeed logs no throughput, but its x axis counts samples: samples over wall time."""
    if run.start_time is None or run.end_time is None or run.end_time <= run.start_time:
        return []
    first = min(m.first_step for m in metrics)
    last = max(m.last_step for m in metrics)
    if last <= first:
        return []
    rate = (last - first) / (run.end_time - run.start_time)
    return [Figure("samples/s", "samples axis / wall time", rate, "samples/s")]


def _ranks(run: Run, stats: dict[str, MetricSummary]) -> RankFigures | None:
    spreads = []
    for name, m in stats.items():
        split = cross_rank_split(name)
        if split is None or split[1] != "max":
            continue
        base = split[0]
        low, mid = stats.get(f"{base}/min"), stats.get(f"{base}/mean")
        if low is None:
            continue
        centre = mid.mean if mid is not None else (low.mean + m.mean) / 2
        spread = 100 * (m.mean - low.mean) / centre if centre else _NAN
        spreads.append(RankSpread(base, low.mean, centre, m.mean, spread))
    slowest = run.series.get("perf/slowest_rank") or run.series.get(f"{STEP_TIME}/argmax_rank")
    ratio = stats.get("perf/straggler_ratio")
    if not spreads and slowest is None and ratio is None:
        return None
    rank = share = None
    if slowest is not None:
        counts = Counter(int(v) for v in slowest.values if v - v == 0)
        if counts:
            rank, hits = counts.most_common(1)[0]
            share = hits / sum(counts.values())
    world = run.meta.get("world_size")
    spreads.sort(key=lambda s: (s.metric != STEP_TIME, s.metric))
    return RankFigures(
        world_size=world if isinstance(world, int) and world > 1 else None,
        spreads=spreads,
        slowest_rank=rank,
        slowest_share=share,
        straggler_ratio_mean=ratio.mean if ratio is not None else None,
        straggler_ratio_max=ratio.max if ratio is not None else None,
    )


def alert_figures(alerts: Sequence[dict[str, Any]]) -> AlertFigures:
    """Counts per state and rule, the rules still firing, and the most recent alerts."""
    fired = [a for a in alerts if a.get("state") == "firing"]
    last_state: dict[str, str] = {}
    for alert in alerts:
        last_state[str(alert.get("rule"))] = str(alert.get("state"))
    return AlertFigures(
        fired=len(fired),
        resolved=sum(1 for a in alerts if a.get("state") == "resolved"),
        by_rule=dict(Counter(str(a.get("rule")) for a in fired)),
        still_firing=[rule for rule, state in last_state.items() if state == "firing"],
        recent=list(alerts[-20:]),
    )


# ---- key figures side by side ----------------------------------------------------------------


@dataclass(frozen=True)
class KeyRow:
    """One key figure of several runs; ``change`` is the second run's relative to the first."""

    label: str
    unit: str
    values: list[float | None]
    better: str = ""
    """``"lower"`` or ``"higher"`` when a direction is better (for colouring a change)."""

    @property
    def change(self) -> float | None:
        """(b - a) / |a| for the first two runs; None when missing, not finite, or a is 0."""
        if len(self.values) < 2:
            return None
        a, b = self.values[0], self.values[1]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or a == 0:
            return None
        return (b - a) / abs(a)


def key_rows(summaries: Sequence[RunSummary]) -> list[KeyRow]:
    """The key figures of runs side by side, in a fixed order; rows no run has are left out."""
    rows: list[KeyRow] = []

    def add(label: str, unit: str, values: list[float | None], better: str = "") -> None:
        if any(v is not None for v in values):
            rows.append(KeyRow(label, unit, values, better))

    def loss(s: RunSummary, key: str) -> float | None:
        return float(s.loss[key]) if s.loss is not None else None

    add("steps", "", [float(s.steps) for s in summaries])
    add("duration", "s", [s.duration_s for s in summaries])
    for key in ("final", "mean", "min"):
        add(f"{key} loss", "", [loss(s, key) for s in summaries], "lower")
    for name in _union([f.metric for s in summaries for f in s.evals]):
        better = "lower" if "loss" in name.rsplit("/", 1)[-1] else ""
        add(f"{name} (last)", "", [_figure(s.evals, name) for s in summaries], better)
    for label, _, unit in THROUGHPUT:
        add(label, unit, [_figure_by_label(s.throughput, label) for s in summaries], "higher")
    add("step time", "ms", [s.step_time_ms for s in summaries], "lower")
    for label in _union([p.label for s in summaries for p in s.breakdown]):
        add(f"  {label}", "ms", [_part(s, label) for s in summaries], "lower")
    peaks = [s.peak_memory.value if s.peak_memory else None for s in summaries]
    add("peak memory", "MB", peaks, "lower")
    add("alerts fired", "", [float(s.alerts.fired) for s in summaries], "lower")
    if any(s.restarts is not None for s in summaries):
        for label, unit, values, better in restart_rows(
            [(s.restarts, s.source) for s in summaries]
        ):
            add(label, unit, values, better)
    return rows


def compare(a: RunSummary, b: RunSummary) -> list[KeyRow]:
    """The key figures of two runs side by side, with B's change relative to A."""
    return key_rows([a, b])


def _union(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _figure(figures: list[Figure], metric: str) -> float | None:
    return next((f.value for f in figures if f.metric == metric), None)


def _figure_by_label(figures: list[Figure], label: str) -> float | None:
    return next((f.value for f in figures if f.label == label), None)


def _part(summary: RunSummary, label: str) -> float | None:
    return next((p.mean_ms for p in summary.breakdown if p.label == label), None)
