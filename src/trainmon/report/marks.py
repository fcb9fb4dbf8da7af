"""What the report draws over its charts, per run: alerts, restarts and the other x axes.

* :func:`alert_marks`: every alert with a step; one whose metric a chart draws (the chart
  *watches* it) is a marker on that chart alone, at its step and value, and any other alert a
  dashed vertical line on every step chart of its run;
* :func:`restart_marks`: where each later attempt of a restarted trainmon journal began;
* :func:`samples_axis` and :func:`~trainmon.report.wallclock.wall_axis`: a run's samples-seen
  counter and its clock per step, the page's "samples" and "wall time" x axes;
* :func:`run_entries`: all of the above that a page keeps per run (``payload.runs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from trainmon.journal import attempts_in
from trainmon.report.attempts import read_attempts
from trainmon.report.downsample import minmax_buckets
from trainmon.report.loading import alert_step
from trainmon.report.model import Run, cross_rank_split, role
from trainmon.report.wallclock import wall_axis


def watched_metrics(chart: dict[str, Any]) -> dict[int, set[str]]:
    """Per run, the metrics a planned chart draws (each under its own name and its role)."""
    out: dict[int, set[str]] = {}

    def add(run: int, name: str) -> None:
        if not name:
            return
        names = out.setdefault(run, set())
        names.update((name, role(name)))
        split = cross_rank_split(name)
        if split is not None:  # a band of perf/step_time_ms watches perf/step_time_ms
            names.update((split[0], role(split[0])))

    kind = chart["kind"]
    if kind == "lines":
        for s in chart["series"]:
            add(s["run"], s["metric"])
    elif kind == "stacked":
        stack = chart["stack"]
        for part in stack["parts"]:
            add(stack["run"], part["metric"])
        if stack["total"] is not None:
            add(stack["run"], stack["total"]["metric"])
    elif kind == "band":
        for band in chart["bands"]:
            for name in band.get("metrics", ()):
                add(band["run"], name)
    return out


def alert_marks(runs: Sequence[Run], charts: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Every alert with a step: ``charts`` names the step charts of ``charts`` that draw the
    metric its rule watches (a marker there); none: a line on every step chart of its run."""
    watching: list[tuple[str, dict[int, set[str]]]] = [
        (chart["id"], watched_metrics(chart)) for chart in charts if chart["xUnit"] == "step"
    ]
    marks = []
    for index, run in enumerate(runs):
        for alert in run.alerts:
            step = alert_step(alert)
            if step is None:
                continue
            metric = alert.get("metric")
            metric = metric if isinstance(metric, str) else ""
            value = alert.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
                value = None
            marks.append(
                {
                    "run": index,
                    "x": step,
                    "state": str(alert.get("state", "")),
                    "rule": str(alert.get("rule", "")),
                    "severity": str(alert.get("severity", "")),
                    "message": str(alert.get("message", ""))[:300],
                    "metric": metric,
                    "value": float(value) if value is not None and abs(value) != math.inf else None,
                    "charts": [
                        chart_id
                        for chart_id, watched in watching
                        if metric and metric in watched.get(index, ())
                    ],
                }
            )
    return marks


def restart_marks(run: Run) -> list[dict[str, Any]]:
    """Where each attempt after the first began (its resume step, else its first logged
    step), with a label, for a trainmon journal of two attempts or more; [] otherwise (a
    byte search for a second ``meta`` line decides before the journal is read again)."""
    path = Path(run.path)
    if run.source != "trainmon journal" or not path.is_file() or attempts_in(path) < 2:
        return []
    attempts = read_attempts(path)
    marks = []
    for attempt in attempts[1:]:
        first = attempt.first_step
        if first == float("inf"):
            continue  # it never logged a step: nothing to mark on a step axis
        how = (
            "restarted from scratch"
            if attempt.resume_step is None
            else f"resumed from step {attempt.resume_step - 1}"
        )
        marks.append({"x": int(first), "attempt": attempt.index, "label": how})
    return marks


#: Last name components of a cumulative samples-seen counter logged per step.
SAMPLES_COUNTERS = ("samples", "samples_seen", "global_samples", "consumed_samples")


def samples_axis(run: Run, buckets: int) -> dict[str, Any] | None:
    """The run's samples-seen counter as ``{"x": steps, "y": samples}`` (down-sampled; the
    page interpolates between points), for drawing its step charts over samples; None when
    it logs no such counter on the step axis, or one that ever decreases."""
    for name, series in run.series.items():
        last = role(name).rsplit("/", 1)[-1].lower()
        if series.x_unit != "step" or last not in SAMPLES_COUNTERS or len(series) < 1:
            continue
        x, y = minmax_buckets(series, buckets)
        pairs = [(s, v) for s, v in zip(x, y, strict=True) if v is not None]
        if pairs and all(a[1] <= b[1] for a, b in pairwise(pairs)):
            return {"x": [s for s, _ in pairs], "y": [v for _, v in pairs], "metric": name}
    return None


def run_entries(
    runs: Sequence[Run],
    buckets: int,
    palette: Sequence[str],
    *,
    restarts: bool = True,
    wall_after: Sequence[int | None] | None = None,
) -> list[dict[str, Any]]:
    """What a page keeps per run: name, colour, restarts (None when not asked for), samples
    counter and clock (``wall``: seconds since the run's start per step). ``wall_after``: per
    run, the last step a live page has the clock of; only the clock's points after it are sent
    (marked ``"tail": true``), the whole down-sampled clock where it is None."""

    def wall(index: int, run: Run) -> dict[str, Any] | None:
        after = wall_after[index] if wall_after is not None and index < len(wall_after) else None
        if after is not None and run.clock is not None and len(run.clock):
            return run.clock.tail(after, run.start_time)
        return wall_axis(run.clock, buckets, run.start_time)

    return [
        {
            "name": run.name,
            "color": palette[index % len(palette)],
            "restarts": restart_marks(run) if restarts else None,
            "samples": samples_axis(run, buckets),
            "wall": wall(index, run),
        }
        for index, run in enumerate(runs)
    ]
