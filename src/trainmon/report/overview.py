"""The report's overview: the runs' figures side by side, one column per run.

Three tables, each with a column per run (and, for two runs, B's change relative to A, as
``trainmon compare`` prints it): the key figures (:func:`~trainmon.report.summary.key_rows`
less the parts of the step), the step-time breakdown (each part's mean time and share of the
step) and the ranks (slowest rank, straggler ratio, each reduced metric's spread across ranks).
A table no run has figures for is left out. Every header cell of a run is ``<th class="run">``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from trainmon.report.summary import KeyRow, RankFigures, RunSummary, key_rows
from trainmon.report.text import figure, number, percent


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _head(first: str, summaries: Sequence[RunSummary], change: bool) -> str:
    runs = "".join(f'<th class="run">{_e(s.run)}</th>' for s in summaries)
    last = "<th>change</th>" if change else ""
    return f"<thead><tr><th>{_e(first)}</th>{runs}{last}</tr></thead>"


def _change(values: Sequence[float | None], better: str) -> str:
    """B's change relative to A (as ``trainmon compare`` shows it), coloured when ``better``
    says which way is better."""
    change = KeyRow("", "", list(values), better).change
    if change is None:
        return '<td class="change">-</td>'
    css = ""
    if change and better:
        css = " better" if (change < 0) == (better == "lower") else " worse"
    return f'<td class="change{css}">{percent(100 * change, signed=True)}</td>'


def _key_table(summaries: Sequence[RunSummary]) -> str:
    two = len(summaries) == 2
    body = []
    for row in key_rows(summaries):
        if row.label.startswith(" "):
            continue  # a part of the step time: in the breakdown table
        cells = "".join(f"<td>{_e(figure(v, row.unit))}</td>" for v in row.values)
        if two:
            cells += _change(row.values, row.better)
        body.append(f"<tr><td>{_e(row.label.strip())}</td>{cells}</tr>")
    return (
        f'<table class="overview-key">{_head("", summaries, two)}'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _breakdown_table(summaries: Sequence[RunSummary]) -> str:
    labels = list(dict.fromkeys(p.label for s in summaries for p in s.breakdown))
    if not labels:
        return ""
    two = len(summaries) == 2
    body = []
    for label in labels:
        parts = [next((p for p in s.breakdown if p.label == label), None) for s in summaries]
        cells = "".join(
            f"<td>{number(p.mean_ms)} ms · {percent(p.percent)}</td>" if p else "<td>-</td>"
            for p in parts
        )
        if two:
            cells += _change([p.mean_ms if p else None for p in parts], "lower")
        body.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
    of = "".join(
        f"<td class='muted'>of {_e(s.breakdown_of)}</td>" if s.breakdown else "<td></td>"
        for s in summaries
    )
    body.append(f'<tr class="sub"><td>share</td>{of}{"<td></td>" if two else ""}</tr>')
    return (
        '<h3>Step-time breakdown</h3><table class="overview-breakdown">'
        f"{_head('part (mean ms · share of the step)', summaries, two)}"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _ranks_table(summaries: Sequence[RunSummary]) -> str:
    if all(s.ranks is None for s in summaries):
        return ""
    two = len(summaries) == 2
    rows: list[tuple[str, list[str], list[float | None], str]] = []

    def add(
        label: str, pick: Callable[[Any], Any], show: Callable[[Any], str], better: str = ""
    ) -> None:
        values = [pick(s.ranks) if s.ranks is not None else None for s in summaries]
        if any(v is not None for v in values):
            shown = [show(v) if v is not None else "-" for v in values]
            numbers = [float(v) if isinstance(v, (int, float)) else None for v in values]
            rows.append((label, shown, numbers, better))

    add("ranks", lambda r: r.world_size, number)
    add("slowest rank", lambda r: r.slowest_rank, str)
    add("slowest in", lambda r: r.slowest_share, lambda v: f"{v:.0%} of windows")
    add("straggler ratio (mean)", lambda r: r.straggler_ratio_mean, lambda v: f"{v:.2f}x", "lower")
    add("straggler ratio (max)", lambda r: r.straggler_ratio_max, lambda v: f"{v:.2f}x", "lower")
    metrics = list(dict.fromkeys(x.metric for s in summaries if s.ranks for x in s.ranks.spreads))
    for metric in metrics:

        def spread(ranks: RankFigures, metric: str = metric) -> float | None:
            return next((x.spread_percent for x in ranks.spreads if x.metric == metric), None)

        add(f"{metric} spread", spread, percent, "lower")
    body = []
    for label, shown, numbers, better in rows:
        cells = "".join(f"<td>{_e(text)}</td>" for text in shown)
        if two:
            cells += _change(numbers, better) if better else "<td></td>"
        body.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
    return (
        '<h3>Ranks</h3><table class="overview-ranks">'
        f"{_head('across ranks', summaries, two)}<tbody>{''.join(body)}</tbody></table>"
    )


def overview_section(summaries: Sequence[RunSummary]) -> str:
    """The ``#overview`` section: key figures, breakdown and ranks, a column per run."""
    notes = [f"<li><b>{_e(s.run)}</b>: {_e(note)}</li>" for s in summaries for note in s.notes]
    return (
        '<section id="overview"><h2>Overview</h2>'
        + _key_table(summaries)
        + _breakdown_table(summaries)
        + _ranks_table(summaries)
        + (f'<ul class="notes">{"".join(notes)}</ul>' if notes else "")
        + "</section>"
    )
