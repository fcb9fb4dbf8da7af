"""Report sections beyond scalars: hyper-parameters (differences first), histograms, text.

Drawn as plain HTML and inline SVG, so they read without JavaScript and print. Every string
from a run is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from trainmon.core.records import hparam_differences
from trainmon.report.charts import PALETTE
from trainmon.report.model import Run
from trainmon.report.text import number

#: Texts listed per run (the latest ones).
MAX_TEXTS = 50
#: Snapshots drawn in the "over steps" band of one histogram name.
MAX_SNAPSHOTS = 200
_W, _H = 300, 110


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def hparam_rows(runs: Sequence[Run]) -> list[tuple[str, list[Any], bool]]:
    """(key, value per run or None, differs) for every key, differing keys first."""
    maps = [run.hparams for run in runs]
    differ = set(hparam_differences(maps))
    keys = sorted(set().union(*maps), key=lambda k: (k not in differ, k))
    return [(k, [m.get(k) for m in maps], k in differ) for k in keys]


def hparams_section(runs: Sequence[Run]) -> str:
    """The hyper-parameters table: one column per run, rows that differ marked and first."""
    rows = hparam_rows(runs)
    if not rows:
        return ""
    head = "".join(f"<th>{_e(run.name)}</th>" for run in runs)
    body = "".join(
        f'<tr class="{"differs" if differs else "same"}"><td>{_e(key)}</td>'
        + "".join(f'<td class="text">{_e("-" if v is None else v)}</td>' for v in values)
        + "</tr>"
        for key, values, differs in rows
    )
    differing = sum(1 for *_, d in rows if d)
    lead = (
        f"<p>{differing} of {len(rows)} differ between the runs (listed first, marked).</p>"
        if len(runs) > 1
        else ""
    )
    return (
        f'<section id="hparams"><h2>Hyper-parameters ({len(rows)})</h2>{lead}'
        f"<table><thead><tr><th>hyper-parameter</th>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></section>"
    )


def _bars(record: dict[str, Any], color: str) -> str:
    """The buckets of one histogram as SVG bars (x: value, y: count)."""
    edges, counts = record["edges"], record["counts"]
    if not counts:
        return f'<svg width="{_W}" height="{_H}" class="histogram"></svg>'
    low, high = edges[0], edges[-1]
    span = (high - low) or 1.0
    top = max(counts) or 1
    bars = []
    for i, count in enumerate(counts):
        x0 = (edges[i] - low) / span * _W if high > low else 0.0
        x1 = (edges[i + 1] - low) / span * _W if high > low else _W
        height = count / top * (_H - 4)
        bars.append(
            f'<rect x="{x0:.1f}" y="{_H - height:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
            f'height="{height:.1f}" fill="{color}"><title>[{_e(number(edges[i]))}, '
            f"{_e(number(edges[i + 1]))}): {count}</title></rect>"
        )
    return (
        f'<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" class="histogram" '
        f'role="img">{"".join(bars)}</svg>'
    )


def _band(records: list[dict[str, Any]], color: str) -> str:
    """min–max band and mean line over steps (TensorBoard's distributions, simplified)."""
    shown = records[-MAX_SNAPSHOTS:]
    points = [
        (r["step"], r["min"], r["max"], r["sum"] / r["num"])
        for r in shown
        if r.get("num")
        and all(isinstance(r[k], float) and math.isfinite(r[k]) for k in ("min", "max", "sum"))
    ]
    if len(points) < 2:
        return ""
    first, last = points[0][0], points[-1][0]
    low = min(p[1] for p in points)
    high = max(p[2] for p in points)
    xs = (last - first) or 1
    ys = (high - low) or 1.0

    def xy(step: int, value: float) -> str:
        return f"{(step - first) / xs * _W:.1f},{_H - 2 - (value - low) / ys * (_H - 4):.1f}"

    upper = " ".join(xy(p[0], p[2]) for p in points)
    lower = " ".join(xy(p[0], p[1]) for p in reversed(points))
    mean = " ".join(xy(p[0], p[3]) for p in points)
    return (
        f'<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" class="distribution" '
        f'role="img"><polygon points="{upper} {lower}" fill="{color}" fill-opacity="0.25"/>'
        f'<polyline points="{mean}" fill="none" stroke="{color}" stroke-width="1.5"/></svg>'
    )


def histograms_section(runs: Sequence[Run]) -> str:
    """Per histogram name and run: the last snapshot's buckets and min–max/mean over steps."""
    names = sorted(set().union(*(run.histograms for run in runs)))
    if not names:
        return ""
    figures = []
    for name in names:
        cells = []
        for index, run in enumerate(runs):
            records = run.histograms.get(name)
            if not records:
                continue
            color = PALETTE[index % len(PALETTE)]
            last = records[-1]
            mean = last["sum"] / last["num"] if last.get("num") else math.nan
            caption = (
                f"{_e(run.name)} · step {_e(last['step'])} · min {number(last['min'])} · "
                f"mean {number(mean)} · max {number(last['max'])} · {number(last['num'])} values"
                + (f" · {number(last['non_finite'])} NaN/Inf" if last.get("non_finite") else "")
                + f" · {len(records)} snapshot(s), steps {records[0]['step']}–{last['step']}"
            )
            cells.append(
                f'<div class="histogram-run"><div class="hint">{caption}</div>'
                f"{_bars(last, color)}{_band(records, color)}</div>"
            )
        figures.append(
            f'<figure class="histogram-figure" data-name="{_e(name)}"><figcaption>{_e(name)}'
            f"</figcaption>{''.join(cells)}</figure>"
        )
    return (
        f'<section id="histograms"><h2>Histograms ({len(names)})</h2>'
        '<p class="muted">Last snapshot\'s buckets; beside it, min–max band and mean over '
        f"steps.</p>{''.join(figures)}</section>"
    )


def texts_section(runs: Sequence[Run]) -> str:
    """The latest texts of each run, as preformatted (escaped) text."""
    rows = []
    for run in runs:
        for record in run.texts[-MAX_TEXTS:]:
            rows.append(
                f"<tr><td>{_e(run.name)}</td><td>{_e(record['step'])}</td>"
                f'<td class="text">{_e(record["name"])}</td>'
                f'<td class="text"><pre>{_e(record["text"])}</pre></td></tr>'
            )
    if not rows:
        return ""
    return (
        f'<section id="texts"><h2>Text ({len(rows)})</h2><table><thead><tr><th>run</th>'
        '<th>step</th><th class="text">name</th><th class="text">text</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )
