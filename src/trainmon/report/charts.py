"""Which charts a report holds, and their (down-sampled) data, as plain JSON-ready dicts.

One section per metric family (``train``, ``eval``, ``perf``, ``mem``, ``comm``, ``other``); in
a section, metrics that share a unit share a chart (all ``*_ms``, all ``*_mb``, all losses,
``samples_per_sec`` with ``job_samples_per_sec``), anything else gets its own. Besides those:

* ``stacked``: per run, the step-time breakdown (forward, backward, optimizer, comm, data, and
  ``other``: the step time the parts do not cover, never below 0) stacked under the step time,
  with the bucket maximum of the step time when down-sampled;
* ``band``: per metric reduced across ranks, the min–max band over ranks with the mean line,
  and per x the slowest rank (``perf/slowest_rank``) and the rank of the max
  (``<metric>/argmax_rank``) for the page's hover; stacked and band charts list their NaN/Inf
  points (``nonfinite``), as each line series does;
* several runs: each metric's runs on one chart (colour = run, dash = metric).

What is drawn over the charts (alerts, restarts, the samples and wall-time axes) is planned
per run in :mod:`trainmon.report.marks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainmon.report.downsample import (
    bucket_means,
    finite_or_none,
    minmax_buckets,
    nonfinite_steps,
)
from trainmon.report.model import (
    BREAKDOWN,
    FAMILIES,
    STEP_TIME,
    Run,
    Series,
    cross_rank_split,
    family,
    role,
)
from trainmon.report.summary import OTHER

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
DASHES: tuple[list[int], ...] = ([], [6, 3], [2, 3], [10, 3, 2, 3])
BREAKDOWN_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#edc948")
OTHER_COLOR = "#bab0ac"
MAX_SERIES_PER_CHART = 8
#: The cross-rank series naming the slowest rank of each window (see trainmon.core.cross_rank).
SLOWEST_RANK = "perf/slowest_rank"

_UNITS = (
    ("_per_sec", "per second"),
    ("_ms", "time (ms)"),
    ("_mb", "memory (MB)"),
    ("_gb", "memory (GB)"),
    ("_gbps", "bandwidth (GB/s)"),
    ("_bytes", "bytes"),
    ("_seconds", "seconds"),
    ("_s", "seconds"),
    ("_pct", "percent"),
    ("_percent", "percent"),
)


def group_of(name: str) -> tuple[str, str, str]:
    """(grouping key, chart title, y-axis label) of a metric within its family."""
    canonical = role(name)
    last = canonical.rsplit("/", 1)[-1].lower()
    if "loss" in last and "scale" not in last:
        return "loss", "loss", "loss"
    if last.endswith("_per_sec"):
        what = last.removeprefix("job_").removesuffix("_per_sec")
        return f"per_sec:{what}", f"{what}/s", f"{what}/s"
    if "_ms_" in last:  # DeepSpeed's elapsed_time_ms_<part>
        return "unit:_ms", "time (ms)", "ms"
    for suffix, title in _UNITS:
        if last.endswith(suffix):
            return f"unit:{suffix}", title, title.rsplit("(", 1)[-1].rstrip(")")
    return f"metric:{name}", name, last


_FIRST = ("loss", "lr", "grad_norm", "per_sec:samples", "per_sec:tokens")


def _priority(key: str) -> int:
    """Charts people look at first come first: loss, learning rate, gradient norm, rates."""
    last = key.rsplit("/", 1)[-1].lower()
    for rank, name in enumerate(_FIRST):
        if key == name or last == name:
            return rank
    return len(_FIRST)


def _x_unit(series: Sequence[Series]) -> str:
    units = {s.x_unit for s in series}
    return units.pop() if len(units) == 1 else "step / samples"


class _Planner:
    def __init__(self, runs: Sequence[Run], buckets: int) -> None:
        self.runs = runs
        self.buckets = buckets
        self.charts: dict[str, list[dict[str, Any]]] = {f: [] for f in FAMILIES}
        self.consumed: set[str] = set()
        self.count = 0

    def add(self, fam: str, chart: dict[str, Any]) -> None:
        chart["id"] = f"chart-{self.count}"
        chart["family"] = fam
        self.count += 1
        self.charts[fam].append(chart)

    # -- step-time breakdown --------------------------------------------------------------

    def breakdowns(self) -> None:
        overlay: list[tuple[int, Series]] = []
        for index, run in enumerate(self.runs):
            total = run.find(STEP_TIME)
            parts = [
                (label, s)
                for label, metric in BREAKDOWN
                if (s := run.find_part(metric)) is not None
            ]
            if total is None and not parts:
                continue
            columns = [s for _, s in parts] + ([total] if total is not None else [])
            self.consumed.update(s.name for s in columns)
            x, values, maxima, downsampled = self._align(columns)
            stacked_parts: list[dict[str, Any]] = [
                {
                    "label": label,
                    "metric": s.name,
                    "color": BREAKDOWN_COLORS[i % len(BREAKDOWN_COLORS)],
                    "values": values[i],
                }
                for i, (label, s) in enumerate(parts)
            ]
            if total is not None and parts:
                other = self._other(values[-1], values[:-1])
                stacked_parts.append(
                    {"label": OTHER, "metric": "", "color": OTHER_COLOR, "values": other}
                )
            stack: dict[str, Any] = {
                "run": index,
                "x": x,
                "parts": stacked_parts,
                "total": None,
                "totalMax": None,
            }
            if total is not None:
                stack["total"] = {"label": "step time", "metric": total.name, "values": values[-1]}
                if downsampled:
                    stack["totalMax"] = {
                        "label": "step time (bucket max)",
                        "metric": total.name,
                        "values": maxima[-1],
                    }
                overlay.append((index, total))
            title = "step time breakdown" + (f" — {run.name}" if len(self.runs) > 1 else "")
            self.add(
                "perf",
                {
                    "kind": "stacked",
                    "title": title,
                    "xUnit": _x_unit(columns),
                    "yLabel": "ms",
                    "runs": [index],
                    "stack": stack,
                    "nonfinite": _nonfinite(index, columns),
                    "downsampled": downsampled,
                    "points": sum(len(s) for s in columns),
                },
            )
        if len(self.runs) > 1 and len(overlay) > 1:
            self.add("perf", self._lines("step time, all runs", "ms", overlay))

    @staticmethod
    def _other(
        total: Sequence[float | None], parts: Sequence[Sequence[float | None]]
    ) -> list[float | None]:
        """Per point, the step time minus the parts (missing parts count 0), never below 0."""
        out: list[float | None] = []
        for index, step in enumerate(total):
            if step is None:
                out.append(None)
                continue
            covered = sum(v for part in parts if (v := part[index]) is not None)
            out.append(max(0.0, step - covered))
        return out

    def _align(
        self, columns: Sequence[Series]
    ) -> tuple[list[int], list[list[float | None]], list[list[float | None]], bool]:
        """Columns on one x (their steps' union); bucket means and maxima when too long."""
        first = columns[0]
        if all(c.steps == first.steps for c in columns[1:]):
            x = first.steps
            data: list[Sequence[float | None]] = [c.values for c in columns]
        else:
            x = sorted(set().union(*(c.steps for c in columns)))
            where = {step: i for i, step in enumerate(x)}
            aligned: list[Sequence[float | None]] = []
            for c in columns:
                column: list[float | None] = [None] * len(x)
                for step, value in zip(c.steps, c.values, strict=True):
                    column[where[step]] = value
                aligned.append(column)
            data = aligned
        if len(x) <= 2 * self.buckets:
            clean = [
                [v if v is not None and v - v == 0 else None for v in column]
                if None in column
                else finite_or_none(column)  # type: ignore[arg-type]
                for column in data
            ]
            return list(x), clean, clean, False
        ranges, means, maxima = bucket_means(data, self.buckets)
        return [x[lo] for lo, _ in ranges], means, maxima, True

    # -- cross-rank bands -----------------------------------------------------------------

    def bands(self) -> dict[str, list[dict[str, Any]]]:
        bases: dict[str, None] = {}
        for run in self.runs:
            for name in run.series:
                split = cross_rank_split(name)
                if split is None:
                    continue
                if split[1] in ("argmax_rank", "argmax_node_rank"):
                    self.consumed.add(name)  # which rank (node) was highest: the band's hover
                elif split[1] == "max" and f"{split[0]}/min" in run.series:
                    bases[split[0]] = None
        out: dict[str, list[dict[str, Any]]] = {f: [] for f in FAMILIES}
        for base in bases:
            over, metric, top = "rank", base, f"{base}/argmax_rank"
            if base.endswith("/nodes"):  # sys/<m>/nodes/*: the same metric across nodes
                over, metric, top = "node", base.removesuffix("/nodes"), f"{base}/argmax_node_rank"
            bands = []
            units = []
            marks: dict[int, list[dict[str, Any]]] = {}
            for index, run in enumerate(self.runs):
                low, high = run.series.get(f"{base}/min"), run.series.get(f"{base}/max")
                if low is None or high is None:
                    continue
                mid = run.series.get(f"{base}/mean")
                columns = [low, high] + ([mid] if mid is not None else [])
                self.consumed.update(c.name for c in columns)
                units += columns
                x, values, maxima, downsampled = self._align(columns)
                if downsampled:  # keep the band's extremes: min of mins, max of maxes
                    values[0] = self._bucket_min(columns[0], x)
                    values[1] = maxima[1]
                bands.append(
                    {
                        "run": index,
                        "label": self.runs[index].name if len(self.runs) > 1 else metric,
                        "color": PALETTE[index % len(PALETTE)],
                        "x": x,
                        "min": values[0],
                        "max": values[1],
                        "mean": values[2] if mid is not None else None,
                        "metrics": [c.name for c in columns],
                        "over": over,
                        "slowest": _ranks_at(run.series.get(SLOWEST_RANK), x)
                        if over == "rank"
                        else None,
                        "argmax": _ranks_at(run.series.get(top), x),
                    }
                )
                marks[index] = _nonfinite(index, columns)
            if bands:
                out[family(base)].append(
                    {
                        "nonfinite": [mark for found in marks.values() for mark in found],
                        "kind": "band",
                        "title": f"{metric} across {over}s (min–max, mean)",
                        "xUnit": _x_unit(units),
                        "yLabel": group_of(base)[2],
                        "runs": [b["run"] for b in bands],
                        "bands": bands,
                        "points": sum(len(s) for s in units),
                    }
                )
        return out

    def _bucket_min(self, series: Series, x: list[int]) -> list[float | None]:
        """Per bucket (starting at each of ``x``) the lowest finite value of ``series``."""
        out: list[float | None] = []
        steps, values = series.steps, series.values
        j = 0
        for k, start in enumerate(x):
            end = x[k + 1] if k + 1 < len(x) else None
            while j < len(steps) and steps[j] < start:
                j += 1
            low: float | None = None
            while j < len(steps) and (end is None or steps[j] < end):
                v = values[j]
                if v - v == 0 and (low is None or v < low):
                    low = v
                j += 1
            out.append(low)
        return out

    # -- everything else ------------------------------------------------------------------

    def groups(self) -> None:
        names: dict[str, None] = {}
        for run in self.runs:
            names.update(dict.fromkeys(run.series))
        grouped: dict[str, dict[str, tuple[str, str, list[str]]]] = {f: {} for f in FAMILIES}
        for name in sorted(names):
            if name in self.consumed:
                continue
            key, title, y_label = group_of(name)
            fam = family(name)
            entry = grouped[fam].setdefault(key, (title, y_label, []))
            entry[2].append(name)
        for fam in FAMILIES:
            ordered = sorted(grouped[fam].items(), key=lambda item: _priority(item[0]))
            for _, (title, y_label, members) in ordered:
                pairs = [
                    (index, run.series[name])
                    for name in members
                    for index, run in enumerate(self.runs)
                    if name in run.series
                ]
                by_unit: dict[str, list[tuple[int, Series]]] = {}
                for pair in pairs:  # steps and samples never share an axis
                    by_unit.setdefault(pair[1].x_unit, []).append(pair)
                chunks = [
                    group[i : i + MAX_SERIES_PER_CHART]
                    for group in by_unit.values()
                    for i in range(0, len(group), MAX_SERIES_PER_CHART)
                ]
                for number, chunk in enumerate(chunks):
                    if len(members) == 1:
                        label = members[0]
                    else:
                        label = title + (
                            f" ({number + 1}/{len(chunks)})" if len(chunks) > 1 else ""
                        )
                    self.add(fam, self._lines(label, y_label, chunk))

    def _lines(
        self, title: str, y_label: str, pairs: Sequence[tuple[int, Series]]
    ) -> dict[str, Any]:
        metrics = list(dict.fromkeys(s.name for _, s in pairs))
        several_runs = len(self.runs) > 1
        series: list[dict[str, Any]] = []
        downsampled = False
        for index, s in pairs:
            x, y = minmax_buckets(s, self.buckets)
            downsampled = downsampled or len(x) < len(s)
            marks, bad = nonfinite_steps(s)
            m = metrics.index(s.name)
            if several_runs:
                color, dash = PALETTE[index % len(PALETTE)], DASHES[m % len(DASHES)]
                label = self.runs[index].name + (f" · {s.name}" if len(metrics) > 1 else "")
            else:
                color, dash, label = PALETTE[m % len(PALETTE)], [], s.name
            series.append(
                {
                    "run": index,
                    "metric": s.name,
                    "label": label,
                    "color": color,
                    "dash": dash,
                    "x": x,
                    "y": y,
                    "nonfinite": marks,
                    "nonfiniteCount": bad,
                }
            )
        finite = [v for entry in series for v in entry["y"] if v is not None]
        return {
            "kind": "lines",
            "title": title,
            "xUnit": _x_unit([s for _, s in pairs]),
            "yLabel": y_label,
            "runs": sorted({index for index, _ in pairs}),
            "series": series,
            "positive": bool(finite) and min(finite) > 0,
            "downsampled": downsampled,
            "points": sum(len(s) for _, s in pairs),
        }


def _nonfinite(run: int, columns: Sequence[Series]) -> list[dict[str, Any]]:
    """Where the columns of a stacked or band chart hold NaN/Inf: ``{run, x, metric}``."""
    out = []
    for series in columns:
        steps, _ = nonfinite_steps(series)
        out += [{"run": run, "x": step, "metric": series.name} for step in steps]
    return out


def _ranks_at(series: Series | None, x: Sequence[int]) -> list[int | None] | None:
    """Per ``x``, the rank ``series`` names at the last step at or before it (None before its
    first); None without the series."""
    if series is None:
        return None
    steps, values = series.steps, series.values
    out: list[int | None] = []
    j = -1
    for at in x:
        while j + 1 < len(steps) and steps[j + 1] <= at:
            j += 1
        value = values[j] if j >= 0 else None
        out.append(int(value) if value is not None and value - value == 0 else None)
    return out


def plan_charts(runs: Sequence[Run], buckets: int) -> list[dict[str, Any]]:
    """Every chart of the report, grouped by family in :data:`FAMILIES` order."""
    planner = _Planner(runs, buckets)
    planner.breakdowns()
    bands = planner.bands()
    planner.groups()
    for fam in FAMILIES:
        for chart in bands[fam]:
            planner.add(fam, chart)
    return [chart for fam in FAMILIES for chart in planner.charts[fam]]
