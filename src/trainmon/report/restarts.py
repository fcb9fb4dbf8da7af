"""What ``summary``, ``compare`` and ``report`` say of a run that was restarted into its folder.

Those readers already count each step once (the latest attempt's, see
:func:`~trainmon.journal.read_journal`); this adds how many restarts there were, how much
work was redone, and the goodput split of :mod:`trainmon.report.goodput`. Only a journal with
more than one attempt is read a second time (one byte search tells).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from trainmon.journal import attempts_in
from trainmon.report.attempts import read_attempts, restarts_of
from trainmon.report.goodput import BADPUT, measure
from trainmon.report.timeline import Segment, job_timeline, style, timeline_svg


@dataclass(frozen=True)
class RestartFigures:
    """A restarted run's figures: restarts, redone work, goodput and the badput split."""

    restarts: int
    redone_steps: int
    lost_work_s: float
    wall_s: float
    productive_s: float
    goodput: float | None
    badput: dict[str, float]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Per attempt: ``index``, ``ended``, ``steps`` and ``seconds`` (its own split)."""
    lines: list[str] = field(default_factory=list)
    """One line per restart (``resumed from step 20 · steps 21–30 ... replaced``)."""
    timeline: list[list[dict[str, Any]]] = field(default_factory=list)
    """Per attempt, its segments along wall time (``goodput --json --timeline``'s form)."""


def restart_figures(source: str, path: str | Path) -> RestartFigures | None:
    """The figures of a journal with restarts; None for one attempt or another kind of run."""
    path = Path(path)
    if source != "trainmon journal" or not path.is_file() or attempts_in(path) < 2:
        return None
    attempts = read_attempts(path)
    if len(attempts) < 2:
        return None
    result = measure(attempts)
    return RestartFigures(
        restarts=result.restarts,
        redone_steps=result.redone_steps,
        lost_work_s=result.badput["lost_work_s"],
        wall_s=result.wall_s,
        productive_s=result.productive_s,
        goodput=result.goodput,
        badput=dict(result.badput),
        attempts=[
            {**a.as_dict(), "seconds": split}
            for a, split in zip(result.attempts, result.per_attempt, strict=True)
        ],
        lines=[r.describe() for r in restarts_of(result.attempts)],
        timeline=job_timeline(result.attempts).as_json(),
    )


def render_restarts(figures: RestartFigures) -> list[str]:
    """The summary's lines: restarts and redone work, goodput, the badput split."""
    f = figures
    share = "-" if f.goodput is None else f"{f.goodput:.1%}"
    out = [
        f"restarts       {f.restarts} · {f.redone_steps} step(s) redone "
        f"({f.lost_work_s:.2f} s of work lost) · goodput {share} of {f.wall_s:.2f} s",
    ]
    parts = [
        f"{key.removesuffix('_s')} {f.badput[key]:.2f} s"
        for key in BADPUT
        if f.badput[key] >= 0.005
    ]
    if parts:
        out.append("  badput       " + " · ".join(parts))
    out += [f"  attempt {i + 2:<4} {line}" for i, line in enumerate(f.lines)]
    return out


def restart_rows(
    runs: Sequence[tuple[RestartFigures | None, str]],
) -> list[tuple[str, str, list[float | None], str]]:
    """``compare``'s rows ``(label, unit, values, better)`` for runs given as ``(figures,
    source)``: a journal without restarts counts 0 restarts, another kind of run nothing."""

    def of(figures: RestartFigures | None, source: str, key: str) -> float | None:
        if figures is None:
            return 0.0 if source == "trainmon journal" and key != "goodput" else None
        value = getattr(figures, key)
        return None if value is None else float(value) * (100 if key == "goodput" else 1)

    return [
        (label, unit, [of(f, source, key) for f, source in runs], better)
        for label, unit, key, better in (
            ("restarts", "", "restarts", "lower"),
            ("steps redone", "", "redone_steps", "lower"),
            ("work lost", "s", "lost_work_s", "lower"),
            ("goodput", "%", "goodput", "higher"),
        )
    ]


#: Colours of the report's stacked bar, per category (productive first): the timeline's.
COLOURS = {key: style(key)[3] for key in ("productive_s", *BADPUT)}


def stacked_bar_html(figures: RestartFigures, width: int = 720) -> str:
    """An inline SVG: one horizontal bar per attempt, its time (the downtime before it
    included) stacked by category on one seconds scale, then an HTML legend."""
    rows = figures.attempts
    longest = max((sum(a["seconds"].values()) for a in rows), default=0.0) or 1.0
    scale = (width - 150) / longest
    height = 26 * len(rows) + 6
    parts = [f'<svg class="goodput-bar" width="{width}" height="{height}" role="img">']
    for i, attempt in enumerate(rows):
        y = 4 + 26 * i
        parts.append(
            f'<text x="0" y="{y + 14}" font-size="12">attempt {attempt["index"]}'
            f" ({escape(str(attempt['ended']))})</text>"
        )
        x = 150.0
        for key, colour in COLOURS.items():
            seconds = float(attempt["seconds"].get(key, 0.0))
            if seconds <= 0:
                continue
            w = seconds * scale
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="18" fill="{colour}" '
                f'data-category="{key}"><title>{key.removesuffix("_s")}: {seconds:.2f} s'
                "</title></rect>"
            )
            x += w
    parts.append("</svg>")
    legend = " ".join(
        f'<span><i style="display:inline-block;width:10px;height:10px;background:{colour}">'
        f"</i> {key.removesuffix('_s')}</span>"
        for key, colour in COLOURS.items()
    )
    return "".join(parts) + f'<p class="muted">{legend}</p>'


def timeline_html(figures: RestartFigures, width: int = 720) -> str:
    """The attempts along wall time (from the job's first start), as ``goodput --timeline``
    draws them: where the time went and when, the downtime in the gaps between attempts."""
    rows = [[Segment(s["category"], s["start"], s["end"]) for s in row] for row in figures.timeline]
    labels = [f"attempt {a['index']} ({a['ended']})" for a in figures.attempts]
    return (
        '<p class="muted">Each attempt along wall time, from the job\'s first start:</p>'
        + timeline_svg(rows, labels, figures.wall_s, width)
    )


def goodput_section(names: Sequence[str], figures: Sequence[RestartFigures | None]) -> str:
    """The report's "Restarts and goodput" section (empty when no run was restarted)."""
    blocks = []
    for name, f in zip(names, figures, strict=True):
        if f is None:
            continue
        rows = [("productive", f.productive_s), *f.badput.items()]
        table = "".join(
            f"<tr><td>{escape(key.removesuffix('_s'))}</td><td>{seconds:.2f} s</td>"
            f"<td>{seconds / f.wall_s:.1%}</td></tr>"
            for key, seconds in rows
            if f.wall_s > 0
        )
        lines = "".join(f"<li>attempt {i + 2}: {escape(t)}</li>" for i, t in enumerate(f.lines))
        share = "-" if f.goodput is None else f"{f.goodput:.1%}"
        blocks.append(
            f"<h3>{escape(name)}</h3><p>{f.restarts} restart(s), {f.redone_steps} step(s) "
            f"redone ({f.lost_work_s:.2f} s of work lost); goodput <b>{share}</b> of "
            f"{f.wall_s:.2f} s wall time.</p><ul>{lines}</ul>"
            + timeline_html(f)
            + '<p class="muted">Time per attempt, the downtime before it included:</p>'
            + stacked_bar_html(f)
            + f"<table><thead><tr><th></th><th>time</th><th>share</th></tr></thead>"
            f"<tbody>{table}</tbody></table>"
        )
    if not blocks:
        return ""
    return f'<section id="goodput"><h2>Restarts and goodput</h2>{"".join(blocks)}</section>'
