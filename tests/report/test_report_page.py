"""The report page's parts of issue 41, checked in headless Chromium after its scripts ran: the
wall-time x axis (read from the address, every chart kind redrawn over seconds since each
run's start, a pause kept as a jump), one column per run in the overview's tables (written and
served), alerts drawn as markers on the chart of the metric their rule watches, NaN/Inf points
drawn as markers on every chart kind, and the rank bands naming the slowest rank on hover.
Also, without a browser: the per-step clock the wall axis is drawn from (packed arrays, one
time per step), its down-sampling, and the clock's tail a live poll sends. Browser tests are
skipped when Chromium is missing."""

from __future__ import annotations

import json
import math
import re
from array import array
from pathlib import Path
from typing import Any

import pytest
from test_report_browser import (
    CHROMIUM,
    attribute,
    chart_specs,
    dump_dom,
    figures,
    needs_chromium,
)

from trainmon.report import load_run, write_report
from trainmon.report.wallclock import StepClock, wall_axis

T0 = 1_700_000_000.0
PAUSE = 100.0
"""Seconds between steps 20 and 21 of the fast run (a restart's downtime, say)."""


def _line(step: int, when: float, values: dict[str, Any]) -> str:
    return json.dumps({"v": 1, "kind": "scalars", "step": step, "time": when, "values": values})


def fast_run(base: Path) -> Path:
    """Steps 1-40, 2 s apart, with a pause of :data:`PAUSE` s before step 21: loss (NaN at
    step 10), a step-time breakdown (step time Infinity at step 12) and, every 10 steps, the
    step time across ranks with the slowest rank ((step // 10) % 4); an alert on the loss that
    fires at 15 and resolves at 25, and one on a metric no chart draws at step 5."""
    folder = base / "fast"
    folder.mkdir(parents=True)
    lines = [json.dumps({"v": 1, "kind": "meta", "time": T0, "job": "fast"})]
    for step in range(1, 41):
        when = T0 + 2 * step + (PAUSE if step >= 21 else 0.0)
        values: dict[str, Any] = {
            "train/loss": "NaN" if step == 10 else 3.0 / step,
            "perf/step_time_ms": "Infinity" if step == 12 else 50.0 + step % 3,
            "perf/forward_ms": 20.0,
        }
        if step % 10 == 0:
            values.update(
                {
                    "perf/step_time_ms/min": 45.0,
                    "perf/step_time_ms/mean": 50.0,
                    "perf/step_time_ms/max": 60.0 + step,
                    "perf/step_time_ms/argmax_rank": (step // 10) % 4,
                    "perf/slowest_rank": (step // 10) % 4,
                }
            )
        lines.append(_line(step, when, values))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    alerts = [
        {"rule": "loss-high", "state": "firing", "metric": "train/loss", "value": 0.2, "step": 15},
        {
            "rule": "loss-high",
            "state": "resolved",
            "metric": "train/loss",
            "value": 0.1,
            "step": 25,
        },
        {"rule": "disk", "state": "firing", "metric": "sys/disk_free_gb", "value": 1.0, "step": 5},
    ]
    alerts[1]["step"] = 25
    for alert in alerts:
        alert.update(message=f"{alert['rule']} {alert['state']}", time=T0 + int(alert["step"]))
    (folder / "alerts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in alerts))
    return folder


def slow_run(base: Path) -> Path:
    """Steps 1-30, 3 s apart: loss and step time."""
    folder = base / "slow"
    folder.mkdir(parents=True)
    lines = [json.dumps({"v": 1, "kind": "meta", "time": T0 + 500, "job": "slow"})]
    for step in range(1, 31):
        values = {"train/loss": 4.0 / step, "perf/step_time_ms": 70.0, "perf/forward_ms": 30.0}
        lines.append(_line(step, T0 + 500 + 3 * step, values))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def elapsed(step: int) -> float:
    """Seconds from the fast run's start (its first step) to ``step``."""
    return 2 * step - 2 + (PAUSE if step >= 21 else 0.0)


def points(spec: dict[str, Any]) -> list[tuple[int, int]]:
    """(run, step) of every point a chart spec holds."""
    if spec["kind"] == "lines":
        return [(s["run"], x) for s in spec["series"] for x in s["x"]]
    if spec["kind"] == "stacked":
        return [(spec["stack"]["run"], x) for x in spec["stack"]["x"]]
    return [(b["run"], x) for b in spec["bands"] for x in b["x"]]


def wall_range(spec: dict[str, Any]) -> tuple[float, float]:
    """The wall-time range a chart's points span: each run's steps as seconds since its start
    (the fast run: :func:`elapsed`; the slow run: 3 s a step)."""
    seconds = [elapsed(x) if run == 0 else 3.0 * (x - 1) for run, x in points(spec)]
    return min(seconds), max(seconds)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("page")
    runs = [load_run(fast_run(base)), load_run(slow_run(base))]
    return write_report(runs, base / "report.html")


def payload(page: Path) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="trainmon-data">(.*?)</script>',
        page.read_text(encoding="utf-8"),
        re.S,
    )
    assert match is not None
    found: dict[str, Any] = json.loads(match.group(1))
    return found


def drawn(dom: str) -> dict[str, dict[str, str]]:
    """Each figure's attributes by id, after checking the page finished without an error."""
    assert attribute(dom, "body", "data-ready") == "1"
    assert attribute(dom, "body", "data-errors") == "0", re.findall(
        r'id="errors"[^>]*>([^<]*)', dom
    )
    return {f["id"]: f for f in figures(dom)}


# ---- the clock (no browser) --------------------------------------------------------------------


def test_a_journal_keeps_one_packed_time_per_step(tmp_path: Path) -> None:
    """The clock holds one time per step (not per value) in arrays of 8-byte numbers; the
    payload's wall axis is seconds since the run's first step, the pause kept."""
    run = load_run(fast_run(tmp_path))
    clock = run.clock
    assert clock is not None and clock.unit == "step"
    assert isinstance(clock.steps, array) and clock.steps.typecode == "q"
    assert isinstance(clock.times, array) and clock.times.typecode == "d"
    assert list(clock.steps) == list(range(1, 41))
    assert run.scalar_count > 3 * len(clock)
    axis = wall_axis(clock, 2000, run.start_time)
    assert axis is not None
    assert axis["x"] == list(range(1, 41))
    assert axis["y"] == [elapsed(s) for s in range(1, 41)]


def test_a_long_clock_is_down_sampled_keeping_its_longest_pause() -> None:
    """100,000 steps a second apart with one pause of 1,000 s: at most ~3 points per bucket,
    first and last kept, and the two steps around the pause both kept (a jump, not a slope)."""
    clock = StepClock()
    for step in range(1, 100_001):
        clock.add(step, T0 + step + (1000.0 if step > 61_234 else 0.0))
    axis = wall_axis(clock, 100)
    assert axis is not None
    xs, ys = axis["x"], axis["y"]
    assert len(xs) <= 3 * 100 + 2 and xs[0] == 1 and xs[-1] == 100_000
    at = xs.index(61_234)
    assert xs[at + 1] == 61_235 and ys[at + 1] - ys[at] == pytest.approx(1001.0)
    assert ys[-1] == pytest.approx(99_999 + 1000.0)


def test_a_clock_read_out_of_order_keeps_each_steps_latest_time() -> None:
    """A step logged again later (a restart without a timeline) keeps its latest time."""
    clock = StepClock()
    for step, when in ((1, 10.0), (2, 11.0), (3, 12.0), (2, 20.0), (3, 21.0), (4, 22.0)):
        clock.add(step, when)
    clock.settle()
    assert list(clock.steps) == [1, 2, 3, 4] and list(clock.times) == [10.0, 20.0, 21.0, 22.0]


def test_deepspeed_event_files_have_a_clock_on_samples(tmp_path: Path) -> None:
    """DeepSpeed's Train/Samples/* tags are timed on their own x (samples)."""
    from test_report_loading import deepspeed_folder

    deepspeed_folder(tmp_path / "ds", steps=20)
    run = load_run(tmp_path / "ds")
    assert run.clock is not None and run.clock.unit == "samples"
    assert len(run.clock) == len(run.series["Train/Samples/train_loss"])


def test_a_live_update_sends_the_clock_since_the_pages_version(tmp_path: Path) -> None:
    """``--serve``: a poll after steps 41-42 were appended sends the clock of those two steps
    alone (a tail the page appends); a full update sends the whole axis."""
    from trainmon.report.live import LiveRuns

    folder = fast_run(tmp_path)
    runs = LiveRuns([str(folder)], [None])
    first = runs.version
    with open(folder / "metrics.jsonl", "a") as f:
        for step in (41, 42):
            f.write(_line(step, T0 + 2 * step + PAUSE, {"train/loss": 0.05}) + "\n")
    assert runs.refresh()
    update = runs.updates(first)
    assert update["mode"] == "append"
    assert update["runs"][0]["wall"] == {
        "x": [41, 42],
        "y": [elapsed(41), elapsed(42)],
        "unit": "step",
        "tail": True,
    }
    whole = runs.updates(first, full=True)["runs"][0]["wall"]
    assert whole["x"] == list(range(1, 43)) and "tail" not in whole


# ---- in the browser ----------------------------------------------------------------------------


@pytest.mark.slow
@needs_chromium
def test_the_wall_time_axis_redraws_every_chart_over_seconds_since_each_runs_start(
    page: Path, tmp_path: Path
) -> None:
    """#x=wall (the select then shows "wall time") draws every chart kind over seconds since
    its run's start: the fast run's charts end at 178 s (its pause included), the slow run's at
    87 s, both runs' charts start at 0; steps stay the default; the self-test keeps x=wall in
    the address."""
    specs = chart_specs(page)
    steps = drawn(dump_dom(page, tmp_path))
    assert {f["data-x-unit"] for f in steps.values()} == {"step"}
    assert re.search(r'<option value="wall">wall time</option>', dump_dom(page, tmp_path))
    dom = dump_dom(page, tmp_path, "#x=wall")
    wall = drawn(dom)
    assert re.search(r'<option value="wall" selected="">wall time</option>', dom)
    assert {specs[i]["kind"] for i in wall} == {"lines", "stacked", "band"}
    for chart_id, figure in wall.items():
        assert figure["data-x-unit"] == "wall", figure
        assert int(figure["data-ink"]) > 1000, figure
        x_min, x_max = float(figure["data-x-min"]), float(figure["data-x-max"])
        assert (x_min, x_max) == wall_range(specs[chart_id]), figure
        before = steps[chart_id]
        assert (before["data-x-min"], before["data-x-max"]) != (x_min, x_max)
    selftest = dump_dom(page, tmp_path, "#trainmon-selftest&x=wall")
    assert attribute(selftest, "body", "data-errors") == "0"
    assert attribute(selftest, "body", "data-selftest-url").endswith("&amp;x=wall")


@pytest.mark.slow
@needs_chromium
def test_alerts_are_markers_on_the_chart_of_the_metric_their_rule_watches(
    page: Path, tmp_path: Path
) -> None:
    """The loss alerts (firing at 15, resolved at 25) are two markers on the loss chart and
    on no other chart, on steps and on wall time; the alert on a metric no chart draws is a
    line on each step chart of its run that shows step 5 (none on the other run's)."""
    specs = chart_specs(page)
    for fragment in ("", "#x=wall"):
        shown = drawn(dump_dom(page, tmp_path, fragment))
        for chart_id, figure in shown.items():
            spec = specs[chart_id]
            loss = spec["kind"] == "lines" and spec["series"][0]["metric"] == "train/loss"
            assert figure["data-alerts-watched"] == ("2" if loss else "0"), figure
            assert figure["data-alert-markers"] == ("2" if loss else "0"), (fragment, figure)
            steps = [x for run, x in points(spec) if run == 0]
            on_run = spec["xUnit"] == "step" and bool(steps) and min(steps) <= 5 <= max(steps)
            assert figure["data-alert-lines"] == ("1" if on_run else "0"), (fragment, figure)
    marks = payload(page)["alerts"]
    loss_chart = next(
        i for i, c in specs.items() if c["kind"] == "lines" and c["title"] == "train/loss"
    )
    assert [(m["x"], m["state"], m["charts"]) for m in marks if m["rule"] == "loss-high"] == [
        (15, "firing", [loss_chart]),
        (25, "resolved", [loss_chart]),
    ]


@pytest.mark.slow
@needs_chromium
def test_nan_and_inf_points_are_markers_and_the_charts_still_draw(
    page: Path, tmp_path: Path
) -> None:
    """The NaN loss (step 10) is a marker on the loss chart, the Infinity step time (step 12)
    one on the breakdown and the step-time chart; every chart draws with finite axes, on
    steps and on wall time."""
    specs = chart_specs(page)
    for fragment in ("", "#x=wall", "#smoothing=0.9"):
        shown = drawn(dump_dom(page, tmp_path, fragment))
        marked = {}
        for chart_id, figure in shown.items():
            assert figure["data-rendered"] == "1" and int(figure["data-ink"]) > 1000, figure
            for key in ("data-x-min", "data-x-max", "data-y-min", "data-y-max"):
                assert math.isfinite(float(figure[key])), (fragment, key, figure)
            marked[chart_id] = int(figure["data-nonfinite-drawn"])
            assert marked[chart_id] == int(figure["data-nonfinite"]), figure
        kinds = {specs[i]["kind"] for i, n in marked.items() if n}
        assert kinds == {"lines", "stacked"}, (fragment, marked)
        loss = next(i for i, c in specs.items() if c["title"] == "train/loss")
        assert marked[loss] == 1
        stacked = next(i for i, c in specs.items() if c["kind"] == "stacked" and c["runs"] == [0])
        assert marked[stacked] == 1


@pytest.mark.slow
@needs_chromium
def test_hovering_a_rank_band_names_the_slowest_rank_there(page: Path, tmp_path: Path) -> None:
    """The page's self-test hovers every chart: the band (drawn around the mean) names the
    slowest rank at the hovered step, the one perf/slowest_rank logged there."""
    specs = chart_specs(page)
    band = next(i for i, c in specs.items() if c["kind"] == "band")
    assert specs[band]["bands"][0]["mean"] is not None
    assert specs[band]["bands"][0]["slowest"] == [1, 2, 3, 0]
    for fragment in ("#trainmon-selftest", "#trainmon-selftest&x=wall"):
        shown = drawn(dump_dom(page, tmp_path, fragment))
        hover = shown[band].get("data-hover", "")
        found = re.search(r"step (\d+) slowest rank (\d+), max on rank (\d+)", hover)
        assert found, (fragment, hover)
        step, slowest, top = map(int, found.groups())
        assert step % 10 == 0 and slowest == top == (step // 10) % 4, hover


def overview_columns(dom: str) -> dict[str, list[str]]:
    """Per table of the overview section, the runs its header names."""
    start = dom.index('<section id="overview"')
    section = dom[start : dom.index("</section>", start)]
    tables = re.findall(r'<table class="(overview-\w+)"><thead>(.*?)</thead>', section)
    return {name: re.findall(r'<th class="run">([^<]*)</th>', head) for name, head in tables}


@pytest.mark.slow
@needs_chromium
def test_the_overview_has_a_column_per_run(tmp_path: Path) -> None:
    """Three runs: the key figures, the breakdown and the ranks each have a column per run
    (after the page's scripts ran); two runs add a change column, as trainmon compare does."""
    from test_report_browser import build_runs

    runs = [load_run(p) for p in build_runs(tmp_path)]
    page = write_report(runs, tmp_path / "three.html")
    dom = dump_dom(page, tmp_path)
    drawn(dom)
    names = [run.name for run in runs]
    assert overview_columns(dom) == {
        "overview-key": names,
        "overview-breakdown": names,
        "overview-ranks": names,
    }
    dom = dump_dom(write_report(runs[:2], tmp_path / "two.html"), tmp_path)
    drawn(dom)
    assert list(overview_columns(dom).values()) == [names[:2]] * 3
    assert dom.count("<th>change</th>") == 3


@pytest.mark.slow
@needs_chromium
def test_the_served_page_has_a_column_per_run_and_the_wall_axis(tmp_path: Path) -> None:
    """trainmon report A B --serve: the live page (after its scripts and a poll) shows the
    overview with a column per run, and #x=wall draws its charts over wall time."""
    from test_report_browser import chromium
    from test_serve import Server

    server = Server(fast_run(tmp_path), slow_run(tmp_path))
    try:
        result = chromium(["--dump-dom", server.url + "?poll=0.2#x=wall"], tmp_path / "live")
        assert result.returncode == 0, result.stderr[-2000:]
        dom = result.stdout
        shown = drawn(dom)
        assert attribute(dom, "body", "data-live-state") == "live"
        assert set(map(tuple, overview_columns(dom).values())) == {("fast", "slow")}
        assert {f["data-x-unit"] for f in shown.values()} == {"wall"}
    finally:
        server.kill()


@pytest.mark.slow
@needs_chromium
def test_a_served_page_on_wall_time_draws_the_steps_logged_after_it_loaded(
    tmp_path: Path,
) -> None:
    """A served page opened on #x=wall while a Monitor logs a step every 50 ms: each chart
    stays on wall time and draws more points than it had at load, the last one further
    right (the clock's new points came with them)."""
    from test_serve import Server, browse, config, log_steps

    import trainmon

    with trainmon.Monitor(config(tmp_path)) as monitor:
        log_steps(monitor, 1, 20)
        server = Server(tmp_path / "job")
        try:
            dom, _ = browse(server, monitor, "#x=wall", tmp_path / "profile")
        finally:
            server.kill()
    shown = drawn(dom)
    assert len(shown) == 4
    for figure in shown.values():
        assert figure["data-x-unit"] == "wall", figure
        assert int(figure["data-points"]) > int(figure["data-points-at-load"]) >= 20, figure
        assert float(figure["data-x-max"]) == float(figure["data-last-x"]) > 0, figure


@pytest.mark.slow
def test_the_page_benchmark_prints_its_table(tmp_path: Path) -> None:
    """benchmarks/bench_report.py --page on a small run prints each row of its table (the
    Chromium rows say "skipped" where Chromium is missing) and exits 0."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_report.py"
    done = subprocess.run(
        [sys.executable, str(script), "--page", "--scalars", "20000", "--appends", "2"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for row in (
        "HTML page (trainmon report)",
        "Chromium: page load",
        "--serve poll: read the appended lines",
        "--serve poll: data.json since the page's version",
    ):
        assert row in done.stdout, done.stdout
    if CHROMIUM is not None:
        assert re.search(r"every chart drawn +\d+ ms median of 3 .*, 0 errors", done.stdout)


def test_node_statistics_are_a_band_across_nodes_naming_the_node(tmp_path: Path) -> None:
    """``sys/<m>/nodes/{min,mean,max,argmax_node_rank}`` (rank 0's figures across nodes) make
    one band titled across nodes, whose hover data is the node with the max; the node rank is
    not drawn as a chart of its own."""
    folder = tmp_path / "nodes"
    folder.mkdir()
    lines = [json.dumps({"v": 1, "kind": "meta", "time": T0, "job": "nodes"})]
    for step in range(1, 31):
        values: dict[str, Any] = {"train/loss": 1.0 / step}
        if step % 10 == 0:
            values.update(
                {
                    "sys/cpu_percent/nodes/min": 10.0,
                    "sys/cpu_percent/nodes/mean": 40.0,
                    "sys/cpu_percent/nodes/max": 90.0,
                    "sys/cpu_percent/nodes/argmax_node_rank": step // 10,
                }
            )
        lines.append(_line(step, T0 + step, values))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    specs = chart_specs(write_report([load_run(folder)], tmp_path / "report.html"))
    titles = [spec["title"] for spec in specs.values()]
    band = next(spec for spec in specs.values() if spec["kind"] == "band")
    assert band["title"] == "sys/cpu_percent across nodes (min–max, mean)"
    assert band["bands"][0]["over"] == "node"
    assert band["bands"][0]["argmax"] == [1, 2, 3]
    assert band["bands"][0]["slowest"] is None
    assert not [title for title in titles if "argmax_node_rank" in title]
