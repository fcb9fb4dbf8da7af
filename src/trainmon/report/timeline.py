"""Goodput along wall time: each attempt's seconds as intervals, placed where they happened.

:func:`~trainmon.report.goodput.measure` says how many seconds went to each category; this
says when, by the same rules (its ``_split`` read interval by interval), so that ``trainmon
goodput --timeline`` and the report's timeline draw what the table counts (a test holds the
two together). Neighbouring intervals of one category merge; runs of intervals shorter than a
thousandth of the wall time (a data wait in each of a million steps) are packed into bins of
that size, each keeping its categories' exact seconds in their order of appearance. So a
category's total is exact and its place exact to a bin, and a long run gives a few thousand
segments, not millions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, NamedTuple

from trainmon.report.attempt_time import attempt_pieces
from trainmon.report.attempts import Attempt

#: Per category (``measure``'s keys, in the order drawn in legends): its letter in plain
#: text, its name, its 256-colour ANSI background and its colour in the HTML report.
CATEGORIES: dict[str, tuple[str, str, int, str]] = {
    "startup_s": ("S", "start-up", 109, "#90a4ae"),
    "productive_s": ("P", "productive", 28, "#2e7d32"),
    "checkpoint_save_s": ("C", "checkpoint save", 25, "#1565c0"),
    "checkpoint_load_s": ("L", "checkpoint load", 75, "#42a5f5"),
    "lost_work_s": ("X", "lost work", 160, "#c62828"),
    "downtime_s": ("D", "down", 238, "#424242"),
    "data_wait_s": ("W", "data wait", 178, "#f9a825"),
    "between_steps_s": ("B", "between steps", 137, "#8d6e63"),
    "eval_s": ("E", "eval", 54, "#6a1b9a"),
    "stall_s": ("H", "stall", 208, "#ef6c00"),
    "other_s": (".", "other", 250, "#bdbdbd"),
}
#: Shown in every legend; the others only where they occur.
ALWAYS = frozenset(
    {
        "startup_s",
        "productive_s",
        "checkpoint_save_s",
        "checkpoint_load_s",
        "lost_work_s",
        "downtime_s",
    }
)
#: The bins a job's wall time is packed into at most (see the module doc).
DEFAULT_BINS = 1000


class Segment(NamedTuple):
    """One interval of one category: ``(category, start, end)`` in unix seconds."""

    category: str
    start: float
    end: float


@dataclass
class Timeline:
    """A job's attempts as rows of segments, in ``measure``'s order (by start); a row holds
    the downtime before its attempt, as its split does."""

    origin: float
    """The first attempt's start (unix seconds): the timeline's 0."""
    wall_s: float
    attempts: list[Attempt]
    rows: list[list[Segment]]

    def as_json(self) -> list[list[dict[str, Any]]]:
        """``goodput --json``'s ``timeline``: per attempt, its segments as
        ``{"category", "start", "end"}`` in seconds from the job's start."""
        return [
            [
                {
                    "category": s.category,
                    "start": round(s.start - self.origin, 6),
                    "end": round(s.end - self.origin, 6),
                }
                for s in row
            ]
            for row in self.rows
        ]


def job_timeline(attempts: Sequence[Attempt], bins: int = DEFAULT_BINS) -> Timeline:
    """The attempts' segments, with the downtime from the latest finish before each attempt
    to its start (``measure``'s rule); runs shorter than ``wall / bins`` packed."""
    ordered = sorted(attempts, key=lambda a: a.start)
    if not ordered:
        return Timeline(0.0, 0.0, [], [])
    origin = ordered[0].start
    wall = max(a.finish for a in ordered) - origin
    resolution = wall / bins if bins > 0 and wall > 0 else 0.0
    rows = []
    previous_finish: float | None = None
    for attempt in ordered:
        row = _Row(resolution)
        if previous_finish is not None:
            row.add("downtime_s", previous_finish, attempt.start)
            previous_finish = max(previous_finish, attempt.finish)
        else:
            previous_finish = attempt.finish
        for category, low, high in attempt_pieces(attempt):
            row.add(category, low, high)
        rows.append(row.done())
    return Timeline(origin, wall, ordered, rows)


class _Row:
    """One attempt's pieces, arriving in time order: neighbours of one category merged, runs
    of pieces shorter than ``resolution`` packed into bins of that size (module doc)."""

    def __init__(self, resolution: float) -> None:
        self.resolution = resolution
        self.out: list[Segment] = []
        self.bin: dict[str, float] = {}
        self.bin_start = self.bin_end = 0.0

    def add(self, category: str, low: float, high: float) -> None:
        """The next piece (its ``low`` the previous one's ``high``)."""
        if high <= low:
            return
        if high - low >= self.resolution:
            self._flush()
            self._emit(category, low, high)
            return
        if not self.bin:
            self.bin_start = low
        self.bin[category] = self.bin.get(category, 0.0) + (high - low)
        self.bin_end = high
        if high - self.bin_start >= self.resolution:
            self._flush()

    def done(self) -> list[Segment]:
        """The row's segments, the last bin included."""
        self._flush()
        return self.out

    def _flush(self) -> None:
        t, last = self.bin_start, len(self.bin) - 1
        for i, (category, seconds) in enumerate(self.bin.items()):
            end = self.bin_end if i == last else t + seconds
            self._emit(category, t, end)
            t = end
        self.bin = {}

    def _emit(self, category: str, low: float, high: float) -> None:
        out = self.out
        if out and out[-1].category == category and abs(out[-1].end - low) <= 1e-9:
            out[-1] = Segment(category, out[-1].start, high)
        else:
            out.append(Segment(category, low, high))


# ---- drawing ----------------------------------------------------------------------------


def style(category: str) -> tuple[str, str, int, str]:
    """A category's letter, name, ANSI colour and HTML colour (grey "?" for one added to
    ``measure`` but not here yet)."""
    return CATEGORIES.get(category) or ("?", category.removesuffix("_s"), 244, "#9e9e9e")


def legend_keys(rows: Sequence[Sequence[Segment]]) -> list[str]:
    """The categories a legend names: the usual six, and the others that occur."""
    present = {s.category for row in rows for s in row}
    unknown = sorted(present - set(CATEGORIES))
    return [key for key in CATEGORIES if key in ALWAYS or key in present] + unknown


def render_text(tl: Timeline, width: int = 72, colour: bool = False) -> list[str]:
    """One line per attempt, ``width`` columns along the wall time, each column shown as the
    category covering most of it (blank where the attempt was not running): a letter, or an
    ANSI background colour with ``colour``; then a time axis and a legend."""
    width = max(10, width)
    labels = [f"#{a.index}" for a in tl.attempts]
    pad = max((len(label) for label in labels), default=2) + 2
    lines = []
    for label, row in zip(labels, tl.rows, strict=True):
        cells = _columns(row, tl.origin, tl.wall_s, width)
        bar = _colour_bar(cells) if colour else "".join(_letter(c) for c in cells)
        lines.append(f"  {label:<{pad}}{bar}")
    lines.append(" " * (pad + 2) + _axis(tl.wall_s, width))
    keys = legend_keys(tl.rows)
    if colour:
        names = [f"{_ansi(style(k)[2], ' ')} {style(k)[1]}" for k in keys]
    else:
        names = [f"{style(k)[0]} {style(k)[1]}" for k in keys]
    line, shown = "", 0  # wrapped at the bars' width (``shown``: its visible characters)
    for name, key in zip(names, keys, strict=True):
        more = len(style(key)[1]) + 2
        if line and shown + 2 + more > width:
            lines.append(" " * (pad + 2) + line)
            line, shown = "", 0
        line += ("  " if line else "") + name
        shown += (2 if shown else 0) + more
    lines.append(" " * (pad + 2) + line)
    return lines


def _columns(row: Sequence[Segment], origin: float, wall: float, width: int) -> list[str | None]:
    """Per column, the category covering most of it; None where nothing covers most."""
    if wall <= 0:
        return [None] * width
    cover: list[dict[str, float]] = [{} for _ in range(width)]
    per = wall / width
    for category, start, end in row:
        a, b = (start - origin) / per, (end - origin) / per
        for c in range(max(0, int(a)), min(width, math.ceil(b))):
            share = min(b, c + 1) - max(a, c)
            if share > 0:
                cover[c][category] = cover[c].get(category, 0.0) + share
    cells: list[str | None] = []
    for shares in cover:
        best = max(shares, key=shares.__getitem__, default=None)
        blank = 1.0 - sum(shares.values())
        cells.append(None if best is None or blank > shares[best] else best)
    return cells


def _letter(category: str | None) -> str:
    return " " if category is None else style(category)[0]


def _ansi(code: int, text: str) -> str:
    return f"\x1b[48;5;{code}m{text}\x1b[0m"


def _colour_bar(cells: list[str | None]) -> str:
    """Runs of one category as one coloured stretch of spaces."""
    out, i = [], 0
    while i < len(cells):
        j = i
        while j < len(cells) and cells[j] == cells[i]:
            j += 1
        category, run = cells[i], " " * (j - i)
        out.append(run if category is None else _ansi(style(category)[2], run))
        i = j
    return "".join(out)


def _axis(wall: float, width: int) -> str:
    """``0 s`` under the first column, the total under the last, round ticks between where
    they fit."""
    unit, scale = _unit(wall)
    line = [" "] * width
    end = _label(wall / scale, unit)
    line[width - len(end) :] = end
    reach = 0
    step = _nice(wall / scale / max(1, width // 12))
    k = 0
    while step > 0 and k * step * scale < wall:
        text = "0 s" if k == 0 else _label(k * step, unit)
        at = round(k * step * scale / wall * (width - 1)) if wall > 0 else 0
        if at >= reach and at + len(text) + 2 <= width - len(end):
            line[at : at + len(text)] = text
            reach = at + len(text) + 2
        k += 1
    if wall <= 0:
        line[:3] = "0 s"
    return "".join(line)


def _unit(wall: float) -> tuple[str, float]:
    if wall >= 3 * 3600:
        return "h", 3600.0
    if wall >= 180:
        return "min", 60.0
    return "s", 1.0


def _nice(raw: float) -> float:
    """The smallest of 1, 2, 5 × 10^k at least ``raw``."""
    if raw <= 0:
        return 0.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _label(value: float, unit: str) -> str:
    return f"{value:.3g} {unit}"


def timeline_svg(
    rows: Sequence[Sequence[Segment]], labels: Sequence[str], wall_s: float, width: int = 720
) -> str:
    """An inline SVG of rows whose segments are in seconds from the job's start: x is wall
    time, each attempt a row, a time axis with round ticks; then an HTML legend."""
    left, plot = 150.0, width - 160.0
    scale = plot / wall_s if wall_s > 0 else 0.0
    height = 26 * len(rows) + 30
    parts = [
        f'<svg class="goodput-timeline" width="{width}" height="{height}" role="img" '
        f'data-wall="{wall_s:.6f}" data-scale="{scale:.6f}">'
    ]
    for i, (label, row) in enumerate(zip(labels, rows, strict=True)):
        y = 4 + 26 * i
        parts.append(
            f'<g class="attempt" data-attempt="{i + 1}"><text x="{left - 6:.0f}" y="{y + 14}" '
            f'font-size="12" text-anchor="end">{escape(label)}</text>'
        )
        for category, start, end in row:
            _, name, _, fill = style(category)
            parts.append(
                f'<rect x="{left + start * scale:.3f}" y="{y}" width="{(end - start) * scale:.3f}"'
                f' height="18" fill="{fill}" data-category="{category}" '
                f'data-start="{start:.6f}" data-end="{end:.6f}"><title>{name}: {start:.2f}–'
                f"{end:.2f} s ({_duration(end - start)})</title></rect>"
            )
        parts.append("</g>")
    axis_y = 4 + 26 * len(rows)
    parts.append(
        f'<line x1="{left}" x2="{left + plot}" y1="{axis_y}" y2="{axis_y}" stroke="#757575"/>'
    )
    unit, unit_s = _unit(wall_s)
    step = _nice(wall_s / unit_s / 6)
    k = 0
    while step > 0 and k * step * unit_s <= wall_s * (1 + 1e-9):
        x = left + k * step * unit_s * scale
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_y}" y2="{axis_y + 4}" stroke="#757575"/>'
            f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="middle">'
            f"{_label(k * step, unit)}</text>"
        )
        k += 1
    parts.append("</svg>")
    legend = " ".join(
        f'<span><i style="display:inline-block;width:10px;height:10px;'
        f'background:{style(key)[3]}"></i> {style(key)[1]}</span>'
        for key in legend_keys(rows)
    )
    return "".join(parts) + f'<p class="muted">{legend}</p>'
