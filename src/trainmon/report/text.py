"""Terminal tables: ``trainmon summary`` and ``trainmon compare``.

Numbers use the console writer's short form (:func:`trainmon.writers.console.format_value`), so
a value reads the same in the progress lines, the summary and the report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from trainmon.report.restarts import render_restarts
from trainmon.report.summary import KeyRow, RunSummary
from trainmon.writers.console import format_value


def number(value: float | None) -> str:
    """A figure for a table cell: ``-`` when missing, ``nan``/``inf`` spelled out; counts
    (ints) in full with thousands separators, measurements in the console's one format."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return format_value(value)


def duration(seconds: float | None) -> str:
    """``1 h 02 min``, ``3 min 07 s``, ``12.3 s`` or ``250 ms``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def figure(value: float | None, unit: str) -> str:
    """A key figure with its unit: megabytes as MB/GB, seconds as a duration."""
    if value is None:
        return "-"
    if unit == "MB":
        return megabytes(value)
    if unit == "s":
        return duration(value)
    return number(value) + (f" {unit}" if unit else "")


def megabytes(mb: float) -> str:
    """``1.90 GB`` or ``512 MB``."""
    if not math.isfinite(mb):
        return str(mb)
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def percent(value: float | None, signed: bool = False) -> str:
    """``12.3%`` (``+12.3%`` when signed); ``-`` when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def table(rows: Sequence[Sequence[str]], right: Sequence[bool], indent: str = "  ") -> list[str]:
    """Aligned columns: left-aligned where ``right`` is False, right-aligned otherwise."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(right))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if align else cell.ljust(width)
            for cell, width, align in zip(row, widths, right, strict=True)
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def alert_line(alert: dict[str, Any]) -> str:
    """One alert as a line: time, step, state, rule and its message."""
    when = alert.get("time")
    stamp = (
        datetime.fromtimestamp(when, tz=timezone.utc).astimezone().strftime("%H:%M:%S")
        if isinstance(when, (int, float)) and math.isfinite(when) and when > 0
        else "--:--:--"
    )
    step = alert.get("step")
    where = f"step {step}" if isinstance(step, int) else "step -"
    state = str(alert.get("state", "?"))
    severity = alert.get("severity")
    tag = f"{state} ({severity})" if severity and severity != "warning" else state
    message = str(alert.get("message", "")).replace("\n", " ")
    return f"{stamp}  {where}  {tag}  {alert.get('rule')}: {message}"


def render_summary(summary: RunSummary, max_metrics: int | None = None) -> str:
    """The ``trainmon summary`` text."""
    s = summary
    out = [f"run {s.run}  ({s.source}: {s.path})"]
    span = f"{number(s.first_step)} … {number(s.last_step)}" if s.first_step is not None else "none"
    if s.x_unit == "samples":
        span = f"at samples {span}"
    out.append(
        f"  {number(s.steps)} steps logged ({span}) in {duration(s.duration_s)} · "
        f"{len(s.metrics)} metrics · {number(s.scalars)} values"
    )
    out.append("")
    rows = [["metric", "last", "min", "max", "mean", "count"]]
    shown = s.metrics if max_metrics is None else s.metrics[:max_metrics]
    for m in shown:
        count = number(m.count) + (f" ({m.nonfinite} non-finite)" if m.nonfinite else "")
        rows.append([m.name, number(m.last), number(m.min), number(m.max), number(m.mean), count])
    out += table(rows, [False, True, True, True, True, True])
    if len(shown) < len(s.metrics):
        out.append(f"  ... {len(s.metrics) - len(shown)} more (--all shows every metric)")
    out.append("")
    out += _key_figures(s)
    if s.restarts is not None:
        out += render_restarts(s.restarts)
    if s.notes:
        out.append("")
        out.append("notes")
        out += [f"  - {note}" for note in s.notes]
    return "\n".join(out)


def _key_figures(s: RunSummary) -> list[str]:
    out: list[str] = []
    if s.loss is not None:
        loss = s.loss
        out.append(
            f"loss           final {number(_f(loss['final']))} · mean {number(_f(loss['mean']))}"
            f" · min {number(_f(loss['min']))}  ({loss['metric']})"
        )
    for figure in s.evals:
        out.append(f"{figure.metric:<14} last {number(figure.value)}")
    if s.step_time_ms is not None or s.breakdown:
        head = (
            f"step time      {number(s.step_time_ms)} ms per step"
            if s.step_time_ms is not None
            else "step time      (no perf/step_time_ms: shares of the sum of the parts)"
        )
        out.append(head)
        rows = [
            [part.label, f"{number(part.mean_ms)} ms", percent(part.percent)]
            for part in s.breakdown
        ]
        if rows:
            out += table(rows, [False, True, True], indent="  " + " " * 13)
    if s.throughput:
        out.append(
            "throughput     "
            + " · ".join(
                f"{f.label} {f.value:.1%}" if f.label == "MFU" else f"{number(f.value)} {f.label}"
                for f in s.throughput
            )
        )
    if s.peak_memory is not None:
        others = [f for f in s.memory if f.metric != s.peak_memory.metric]
        out.append(
            f"peak memory    {megabytes(s.peak_memory.value)} ({s.peak_memory.label}, "
            f"{s.peak_memory.metric})"
            + "".join(f" · {f.metric} {megabytes(f.value)}" for f in others)
        )
    ranks = s.ranks
    if ranks is not None:
        head = f"{ranks.world_size} ranks" if ranks.world_size else "across ranks"
        parts = [head]
        if ranks.slowest_rank is not None:
            share = f" in {ranks.slowest_share:.0%} of windows" if ranks.slowest_share else ""
            parts.append(f"slowest rank {ranks.slowest_rank}{share}")
        if ranks.straggler_ratio_mean is not None:
            parts.append(
                f"straggler ratio {ranks.straggler_ratio_mean:.2f}x "
                f"(max {number(ranks.straggler_ratio_max)}x)"
            )
        out.append("ranks          " + " · ".join(parts))
        rows = [
            [
                spread.metric,
                f"min {number(spread.min)}",
                f"mean {number(spread.mean)}",
                f"max {number(spread.max)}",
                f"spread {percent(spread.spread_percent)}",
            ]
            for spread in ranks.spreads
        ]
        if rows:
            out += table(rows, [False, True, True, True, True], indent="  " + " " * 13)
    alerts = s.alerts
    if alerts.fired or alerts.resolved:
        rules = ", ".join(f"{rule} x{n}" for rule, n in alerts.by_rule.items())
        line = f"alerts         {alerts.fired} fired ({rules}), {alerts.resolved} resolved"
        if alerts.still_firing:
            line += f"; still firing: {', '.join(alerts.still_firing)}"
        out.append(line)
        out += [f"  {alert_line(a)}" for a in alerts.recent]
    else:
        out.append("alerts         none")
    return out


def _f(value: float | str) -> float:
    return float(value)


def render_compare(a: RunSummary, b: RunSummary, rows: Sequence[KeyRow]) -> str:
    """The ``trainmon compare`` text: the figures of A and B and B's change relative to A."""
    out = [f"A  {a.run}  ({a.path})", f"B  {b.run}  ({b.path})", ""]
    cells = [["", "A", "B", "change"]]
    for row in rows:
        change = row.change
        first, second = row.values
        cells.append(
            [
                row.label,
                figure(first, row.unit),
                figure(second, row.unit),
                percent(100 * change, signed=True) if change is not None else "-",
            ]
        )
    out += table(cells, [False, True, True, True], indent="")
    for label, summary in (("A", a), ("B", b)):
        out += [f"note ({label}): {note}" for note in summary.notes]
    return "\n".join(out)


def render_hparam_differences(rows: Sequence[Mapping[str, Any]]) -> str:
    """The hyper-parameters whose values differ between A and B (``-``: not logged)."""
    cells = [["hyper-parameter", "A", "B"]]
    for row in rows:
        cells.append(
            [str(row["key"])]
            + ["-" if row[side] is None else str(row[side]) for side in ("a", "b")]
        )
    return "\n".join(
        [
            "",
            f"hyper-parameters that differ ({len(rows)}):",
            *table(cells, [False, False, False], indent=""),
        ]
    )
