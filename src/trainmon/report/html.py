"""The self-contained HTML report: one file, uPlot and the data inline, no network.

The page is readable without JavaScript (key figures, alerts and metric tables are plain
HTML); the charts are drawn by ``assets/report.js`` from one JSON block. Every string from a
run (metric names, alert messages, paths) is escaped, and ``<`` inside the JSON is written as
``\\u003c`` so no value can close the script element.
"""

from __future__ import annotations

import html
import math
import os
import stat
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from trainmon.report.charts import PALETTE, plan_charts
from trainmon.report.downsample import DEFAULT_BUCKETS
from trainmon.report.extras import histograms_section, hparams_section, texts_section
from trainmon.report.marks import alert_marks, run_entries
from trainmon.report.model import FAMILIES, Run, RunError
from trainmon.report.overview import overview_section
from trainmon.report.restarts import goodput_section
from trainmon.report.summary import RunSummary, summarize
from trainmon.report.text import duration, number
from trainmon.version import __version__

_FAMILY_TITLES = {
    "train": "Training",
    "eval": "Evaluation",
    "perf": "Performance",
    "mem": "Memory",
    "comm": "Communication",
    "other": "Other metrics",
}


#: Runs charted in one report (one colour each); further runs are listed, not charted.
MAX_CHARTED_RUNS = len(PALETTE)


def _asset(name: str) -> str:
    return resources.files("trainmon.report").joinpath(name).read_text(encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _json_for_script(payload: Any) -> str:
    return orjson.dumps(payload).decode().replace("<", "\\u003c")


def render_report(
    runs: Sequence[Run],
    buckets: int = DEFAULT_BUCKETS,
    title: str | None = None,
    *,
    live: str = "",
) -> str:
    """The report page for ``runs`` (each needs at least one metric). ``live``: HTML put after
    the page's scripts (``trainmon report --serve`` adds the script that keeps it current)."""
    if not runs:
        raise RunError("no run to report on")
    runs, rest = list(runs[:MAX_CHARTED_RUNS]), list(runs[MAX_CHARTED_RUNS:])
    summaries = [summarize(run) for run in runs]
    charts = plan_charts(runs, buckets)
    marks = alert_marks(runs, charts)
    names = ", ".join(run.name for run in runs) + (f" and {len(rest)} more" if rest else "")
    title = title or f"trainmon report — {names}"
    payload = {
        "runs": run_entries(runs, buckets, PALETTE),
        "charts": charts,
        "alerts": marks,
    }
    counts = {f: sum(1 for c in charts if c["family"] == f) for f in FAMILIES}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="trainmon ' + _e(__version__) + '">',
        f"<title>{_e(title)}</title>",
        f"<style>{_asset('vendor/uPlot.min.css')}</style>",
        f"<style>{_asset('assets/report.css')}</style>",
        "</head>",
        '<body data-ready="0" data-errors="0" data-charts="0">',
        _ERROR_HANDLER,
        '<div id="errors" hidden></div>',
        "<header>",
        f"<h1>{_e(title)}</h1>",
        _runs_list(runs, summaries),
        _other_runs(rest),
        "<noscript><p>Charts need JavaScript; the tables below do not.</p></noscript>",
        "</header>",
        _nav(counts),
        "<main>",
        overview_section(summaries),
        goodput_section([s.run for s in summaries], [s.restarts for s in summaries]),
        _alerts(runs),
        hparams_section(runs),
        *(_family(f, [c for c in charts if c["family"] == f]) for f in FAMILIES if counts[f]),
        histograms_section(runs),
        texts_section(runs),
        _metric_tables(summaries),
        "</main>",
        f"<footer>Written by trainmon {_e(__version__)} on "
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S'))}. Charts: uPlot (MIT license, embedded). "
        "Long series are down-sampled for display, keeping each bucket's min and max.</footer>",
        f'<script type="application/json" id="trainmon-data">{_json_for_script(payload)}</script>',
        f"<script>{_asset('vendor/uPlot.iife.min.js')}</script>",
        f"<script>{_asset('assets/report.js')}</script>",
        *([live] if live else []),
        "</body></html>",
    ]
    return "\n".join(parts)


def write_report(
    runs: Sequence[Run],
    output: str | os.PathLike[str],
    buckets: int = DEFAULT_BUCKETS,
    title: str | None = None,
) -> Path:
    """Render and write the report atomically (a temporary file renamed into place)."""
    for run in runs:
        run.require_metrics()
    target = report_target(output)
    text = render_report(runs, buckets, title)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def report_target(output: str | os.PathLike[str]) -> Path:
    """The regular file the report will replace: ``output``, or the file a symlink at
    ``output`` points to (the report is written through the link, which stays a link).

    Anything else (a device such as ``/dev/null``, a FIFO, a socket, a folder, a dangling
    link) is refused with a :class:`RunError` saying what it is: renaming a file over it would
    replace it (as root, ``-o /dev/null`` would replace the system's).
    """
    given = Path(output)
    target = given
    if given.is_symlink():
        target = given.resolve()
        if not target.exists():
            raise RunError(
                f"-o {given}: a symlink to {target}, which does not exist; refusing to write "
                "through a dangling link (remove it, or name the file itself)"
            )
    try:
        info = target.stat()
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(info.st_mode):
        kind = _file_kind(info.st_mode)
        via = f" (the target of the symlink {given})" if target != given else ""
        raise RunError(
            f"-o {target}{via}: is {kind}, not a regular file; the report would replace it. "
            "Name a regular file (it is replaced atomically) or a new path"
        )
    return target


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((text for check, text in kinds if check(mode)), "not a regular file")


_ERROR_HANDLER = """<script>
window.__trainmonErrors = [];
(function () {
  function report(message) {
    window.__trainmonErrors.push(String(message));
    document.body.setAttribute("data-errors", String(window.__trainmonErrors.length));
    var box = document.getElementById("errors");
    if (box) { box.hidden = false; box.textContent += "Error: " + message + "\\n"; }
  }
  window.addEventListener("error", function (e) {
    report(e.message + (e.filename ? " (" + e.filename + ":" + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) { report(e.reason); });
})();
</script>"""


def _runs_list(runs: Sequence[Run], summaries: Sequence[RunSummary]) -> str:
    items = []
    for index, (run, s) in enumerate(zip(runs, summaries, strict=True)):
        color = PALETTE[index % len(PALETTE)]
        unit = "samples" if s.x_unit == "samples" else "steps"
        span = f"{number(s.first_step)}–{number(s.last_step)}" if s.first_step is not None else ""
        items.append(
            f'<li><span class="swatch" style="background:{color}"></span><b>{_e(run.name)}</b> '
            f'<span class="muted">{_e(run.source)}: {_e(run.path)} · {number(s.steps)} {unit} '
            f"{span} · {duration(s.duration_s)} · {len(s.metrics)} metrics · "
            f"{number(s.scalars)} values</span></li>"
        )
    return f'<ul class="runs">{"".join(items)}</ul>'


def live_sections(runs: Sequence[Run], summaries: Sequence[RunSummary]) -> dict[str, str]:
    """The parts of the page that follow the data, as HTML, for a live page to swap in: the
    list of runs in the header (``runs``), the overview, the alerts and the metric tables."""
    return {
        "runs": _runs_list(runs, summaries),
        "overview": overview_section(summaries),
        "alerts": _alerts(runs),
        "metrics": _metric_tables(summaries),
    }


def live_script(config: dict[str, Any]) -> str:
    """``assets/live.js`` with its ``config`` (a JSON block): what a served page runs."""
    return (
        f'<script type="application/json" id="trainmon-live">{_json_for_script(config)}</script>'
        f"<script>{_asset('assets/live.js')}</script>"
    )


def too_many_runs(count: int) -> str | None:
    """The note a report of ``count`` runs carries when only some of them are charted."""
    if count <= MAX_CHARTED_RUNS:
        return None
    return (
        f"{count} runs given: the first {MAX_CHARTED_RUNS} are charted and tabled (more would "
        f"be unreadable lines and a page of many MB); the other {count - MAX_CHARTED_RUNS} are "
        "listed by name only. Report fewer runs at a time to chart them"
    )


def _other_runs(rest: Sequence[Run]) -> str:
    if not rest:
        return ""
    note = too_many_runs(MAX_CHARTED_RUNS + len(rest))
    items = "".join(
        f"<li><b>{_e(run.name)}</b> <span class='muted'>{_e(run.source)}: {_e(run.path)} · "
        f"{number(run.step_count)} steps · {len(run.series)} metrics</span></li>"
        for run in rest
    )
    return (
        f'<p class="notes" id="not-charted">{_e(note)}.</p>'
        f'<details><summary>{len(rest)} runs not charted</summary><ul class="runs">{items}</ul>'
        "</details>"
    )


def _nav(counts: dict[str, int]) -> str:
    links = [f'<a href="#{f}">{_FAMILY_TITLES[f]} ({counts[f]})</a>' for f in FAMILIES if counts[f]]
    return (
        '<nav><a href="#overview">Overview</a>'
        + "".join(links)
        + '<a href="#metrics">All metrics</a>'
        + '<button id="reset-zoom" type="button">reset zoom</button></nav>'
    )


def _alerts(runs: Sequence[Run]) -> str:
    rows = []
    for run in runs:
        for alert in run.alerts:
            state = str(alert.get("state", ""))
            when = alert.get("time")
            stamp = (
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
                if isinstance(when, (int, float)) and math.isfinite(when) and when > 0
                else "-"
            )
            step = alert.get("step")
            rows.append(
                f"<tr><td>{_e(run.name)}</td><td>{_e(stamp)}</td>"
                f"<td>{_e(step if isinstance(step, int) else '-')}</td>"
                f'<td class="text state-{_e(state)}">{_e(state)}</td>'
                f'<td class="text">{_e(alert.get("rule", ""))}</td>'
                f'<td class="text">{_e(alert.get("message", ""))}</td></tr>'
            )
    if not rows:
        return (
            '<section id="alerts"><h2>Alerts</h2><p class="muted">No alerts recorded.</p></section>'
        )
    shown = rows[-500:]
    more = (
        f'<p class="muted">{len(rows) - len(shown)} earlier alerts not listed.</p>'
        if len(rows) > len(shown)
        else ""
    )
    return (
        f'<section id="alerts"><h2>Alerts ({len(rows)})</h2>{more}<table><thead><tr><th>run</th>'
        '<th>time</th><th>step</th><th class="text">state</th><th class="text">rule</th>'
        '<th class="text">message</th></tr></thead>'
        f"<tbody>{''.join(shown)}</tbody></table></section>"
    )


def _family(fam: str, charts: Sequence[dict[str, Any]]) -> str:
    figures = []
    for chart in charts:
        hint = ""
        if chart.get("downsampled"):
            hint = f"{number(chart['points'])} values, down-sampled (min/max per bucket)"
        log = (
            '<label><input type="checkbox" class="logy"> log scale</label>'
            if chart["kind"] == "lines" and chart.get("positive")
            else ""
        )
        figures.append(
            f'<figure class="chart" id="{chart["id"]}" data-kind="{chart["kind"]}" '
            f'data-family="{fam}"><figcaption>{log}{_e(chart["title"])}'
            f'<span class="hint">{_e(hint)}</span></figcaption>'
            '<div class="plot"></div><div class="alert-hover"></div></figure>'
        )
    return (
        f'<section class="family" id="{fam}" data-family="{fam}">'
        f"<h2>{_FAMILY_TITLES[fam]}</h2>"
        f'<div class="charts">{"".join(figures)}</div></section>'
    )


def _metric_tables(summaries: Sequence[RunSummary]) -> str:
    blocks = []
    for s in summaries:
        rows = "".join(
            f"<tr><td>{_e(m.name)}</td><td>{number(m.last)}</td><td>{number(m.min)}</td>"
            f"<td>{number(m.max)}</td><td>{number(m.mean)}</td><td>{number(m.count)}</td>"
            f"<td>{number(m.nonfinite) if m.nonfinite else ''}</td>"
            f"<td>{number(m.first_step)}–{number(m.last_step)}</td></tr>"
            for m in s.metrics
        )
        blocks.append(
            f"<details{' open' if len(summaries) == 1 else ''}><summary>{_e(s.run)}: "
            f"{len(s.metrics)} metrics</summary><table><thead><tr><th>metric</th><th>last</th>"
            "<th>min</th><th>max</th><th>mean</th><th>count</th><th>NaN/Inf</th>"
            f"<th>{'samples' if s.x_unit == 'samples' else 'steps'}</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></details>"
        )
    return f'<section id="metrics"><h2>All metrics</h2>{"".join(blocks)}</section>'
