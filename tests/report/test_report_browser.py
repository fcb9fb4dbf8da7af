"""The report in a real browser (headless Chromium): it draws every chart, logs no error, the
screenshot is not blank, the smoothing slider draws TensorBoard's EMA and lives in the address,
a one-point or constant series gets sensible axes, a restarted run's step charts mark where
each attempt began, and the x axis (steps or samples) is read from the address. Skipped when
Chromium is not installed. The wall-time axis, the overview's columns, alert and NaN markers
and the bands' slowest rank: test_report_page.py."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainmon.report import load_run, write_report

pytestmark = pytest.mark.slow

CHROMIUM = next(
    (
        p
        for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
        if p and Path(p).exists()
    ),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (apt-get install -y --no-install-recommends chromium)",
)


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium offline (every host name unresolvable) with a fresh profile."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--virtual-time-budget=10000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def dump_dom(page: Path, tmp_path: Path, fragment: str = "") -> str:
    """The DOM after the page's scripts ran."""
    result = chromium(["--dump-dom", page.as_uri() + fragment], tmp_path / "profile-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def screenshot(page: Path, tmp_path: Path) -> bytes:
    """A 1400x2000 PNG screenshot of the page."""
    shot = tmp_path / "shot.png"
    result = chromium(
        [f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
        tmp_path / "profile-shot",
    )
    assert shot.exists(), result.stderr[-2000:]
    return shot.read_bytes()


def png_rgb(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) with zlib."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    stride = width * channels
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), np.uint8)
    previous = np.zeros(stride, np.int64)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if kind == 0:
            row = line
        elif kind == 1:  # Sub: running sum per channel
            row = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            row = (line + previous) % 256
        else:  # Average or Paeth: each byte depends on the decoded byte to its left
            values, above = line.tolist(), previous.tolist()
            decoded = [0] * stride
            for i in range(stride):
                a = decoded[i - channels] if i >= channels else 0
                b = above[i]
                if kind == 3:
                    decoded[i] = (values[i] + (a + b) // 2) % 256
                else:
                    c = above[i - channels] if i >= channels else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                    decoded[i] = (values[i] + pred) % 256
            row = np.array(decoded, np.int64)
        out[y] = row
        previous = row
    return out.reshape(height, width, channels)[:, :, :3]


def attribute(dom: str, element: str, name: str) -> str:
    """An attribute of the first ``element`` tag in the dumped DOM."""
    match = re.search(rf"<{element}\b[^>]*\b{name}=\"([^\"]*)\"", dom)
    assert match is not None, f"no {element}[{name}]"
    return match.group(1)


def figures(dom: str) -> list[dict[str, str]]:
    """Each chart figure's attributes."""
    found = []
    for tag in re.findall(r"<figure\b[^>]*>", dom):
        found.append(dict(re.findall(r'([\w-]+)="([^"]*)"', tag)))
    return found


def build_runs(base: Path) -> list[Path]:
    """Two trainmon runs (every family, alerts, NaN, cross-rank) and a DeepSpeed TB folder."""
    from test_report_loading import deepspeed_folder
    from test_report_summary import alert, build_run, write_alerts

    build_run(base, "run-a", 150, seed=1)
    build_run(base, "run-b", 120, seed=2, slow=1.3)
    write_alerts(
        base / "run-a", [alert("slow-step", "firing", 50), alert("slow-step", "resolved", 70)]
    )
    journal = base / "run-a" / "metrics.jsonl"
    extra = [
        {
            "v": 1,
            "kind": "scalars",
            "step": 150,
            "time": 2e9,
            "values": {
                "comm/all_reduce/latency_ms": 1.5,
                "comm/all_reduce/busbw_gbps": 80.0,
                "custom</script>metric": 3.0,
            },
        },
    ]
    with open(journal, "a") as f:
        for record in extra:
            f.write(json.dumps(record) + "\n")
    deepspeed_folder(base / "ds", steps=80)
    return [base / "run-a", base / "run-b", base / "ds"]


@needs_chromium
def test_every_chart_draws_without_errors_and_the_page_is_not_blank(tmp_path: Path) -> None:
    """Three runs (two trainmon journals, one DeepSpeed TensorBoard folder) in one report:
    the page's scripts finish with no error, each family has its section, every chart
    figure is drawn (painted pixels in its canvas), and the screenshot has real content."""
    runs = [load_run(p) for p in build_runs(tmp_path)]
    page = write_report(runs, tmp_path / "report.html")
    dom = dump_dom(page, tmp_path)
    assert attribute(dom, "body", "data-ready") == "1"
    assert attribute(dom, "body", "data-errors") == "0", re.findall(
        r'id="errors"[^>]*>([^<]*)', dom
    )
    charts = figures(dom)
    families = {f["data-family"] for f in charts}
    assert families == {"train", "eval", "perf", "mem", "comm", "other"}
    for family in families:
        assert f'<section class="family" id="{family}"' in dom
    assert all(f.get("data-rendered") == "1" for f in charts), charts
    assert all(int(f.get("data-ink", "0")) > 1000 for f in charts), charts
    assert int(attribute(dom, "body", "data-charts")) == len(charts)
    assert {f["data-kind"] for f in charts} == {"lines", "stacked", "band"}
    assert dom.count('class="uplot') >= len(charts)
    pixels = png_rgb(screenshot(page, tmp_path)).astype(np.float64)
    gray = pixels.mean(axis=2)
    assert gray.var() > 200, gray.var()
    assert (gray < 200).mean() > 0.02  # text, axes and lines, not a white page
    colours = np.unique(pixels.reshape(-1, 3)[::7], axis=0)
    assert len(colours) > 50


@needs_chromium
def test_the_demo_style_single_run_report_draws(tmp_path: Path) -> None:
    """A run with a NaN loss and an alert draws without error; the NaN is in the chart data
    and the page still finishes."""
    from test_report_summary import alert, build_run, write_alerts

    build_run(tmp_path, "solo", 60, seed=3)
    write_alerts(tmp_path / "solo", [alert("nan-grad", "firing", 17)])
    page = write_report([load_run(tmp_path / "solo")], tmp_path / "solo.html")
    dom = dump_dom(page, tmp_path)
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "body", "data-ready") == "1"
    assert all(f.get("data-rendered") == "1" for f in figures(dom))


@needs_chromium
def test_zoom_hover_reset_and_log_scale_raise_no_error(tmp_path: Path) -> None:
    """The page's self-test (zoom each chart, hover, reset zoom, toggle log scale) runs with
    no error, zoom narrows every chart and reset restores every chart's full range."""
    page = write_report([load_run(p) for p in build_runs(tmp_path)[:2]], tmp_path / "r.html")
    dom = dump_dom(page, tmp_path, "#trainmon-selftest")
    assert attribute(dom, "body", "data-errors") == "0"
    count = len(figures(dom))
    assert attribute(dom, "body", "data-selftest") == f"zoomed {count} reset {count} of {count}"


def tensorboard_smooth(values: list[float | None], weight: float) -> list[float | None]:
    """TensorBoard's scalar-dashboard smoothing, written here as the tests' ground truth: a
    debiased EMA over the finite points (``None`` stands for NaN/Inf and stays as it is), a
    constant series left unchanged."""
    if all(v == values[0] for v in values):
        return list(values)
    last, count, out = 0.0, 0, []
    for value in values:
        if value is None or not math.isfinite(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        count += 1
        out.append(last / (1 - weight**count) if weight != 1 else last)
    return out


def chart_specs(page: Path) -> dict[str, dict[str, Any]]:
    """The page's chart specs (the JSON payload in #trainmon-data), by figure id."""
    match = re.search(
        r'<script type="application/json" id="trainmon-data">(.*?)</script>',
        page.read_text(encoding="utf-8"),
        re.S,
    )
    assert match is not None
    return {chart["id"]: chart for chart in json.loads(match.group(1))["charts"]}


def finite(values: list[float | None]) -> list[float]:
    """The finite values, in order."""
    return [v for v in values if v is not None and math.isfinite(v)]


def assert_smoothed_as_tensorboard(dom: str, page: Path, weight: float) -> int:
    """Every line chart's drawn smoothing (first and last value of its first series, the sum
    over its series) is TensorBoard's EMA of its raw values; returns how many differ from raw."""
    specs = chart_specs(page)
    lines = [f for f in figures(dom) if f["data-kind"] == "lines"]
    assert lines
    differing = 0
    for figure in lines:
        series = specs[figure["id"]]["series"]
        smoothed = [tensorboard_smooth(s["y"], weight) for s in series]
        assert float(figure["data-smoothing"]) == weight
        head = finite(smoothed[0])
        for name, expected in (
            ("data-smoothed-first", head[0] if head else None),
            ("data-smoothed-last", head[-1] if head else None),
        ):
            if expected is None:
                assert figure[name] == "null", figure
            else:
                assert math.isclose(float(figure[name]), expected, rel_tol=1e-12), (name, figure)
        total = math.fsum(v for s in smoothed for v in finite(s))
        raw = math.fsum(v for s in series for v in finite(s["y"]))
        assert math.isclose(float(figure["data-smoothed-sum"]), total, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(float(figure["data-raw-sum"]), raw, rel_tol=1e-9, abs_tol=1e-12)
        differing += not math.isclose(total, raw, rel_tol=1e-6)
    return differing


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three-run report of :func:`build_runs`, written once for this module's tests."""
    base = tmp_path_factory.mktemp("smoothing")
    return write_report([load_run(p) for p in build_runs(base)], base / "report.html")


@needs_chromium
def test_smoothing_in_the_url_draws_tensorboards_ema_of_every_line(
    report_page: Path, tmp_path: Path
) -> None:
    """With #smoothing=0.9 every line chart draws TensorBoard's debiased EMA of its raw values
    (NaN points left out of the average), most of them visibly different from the raw lines."""
    dom = dump_dom(report_page, tmp_path, "#smoothing=0.9")
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "body", "data-ready") == "1"
    assert attribute(dom, "input", "value") == "0.9"
    assert any(
        s["y"].count(None) for c in chart_specs(report_page).values() for s in c.get("series", [])
    )
    differing = assert_smoothed_as_tensorboard(dom, report_page, 0.9)
    assert differing >= 5, differing
    for figure in figures(dom):
        if figure["data-kind"] != "lines":  # breakdown and bands are not smoothed
            assert "data-smoothing" not in figure, figure


@needs_chromium
def test_no_smoothing_draws_the_raw_values(report_page: Path, tmp_path: Path) -> None:
    """With #smoothing=0 every line chart's drawn smoothed series equals its raw values."""
    dom = dump_dom(report_page, tmp_path, "#smoothing=0")
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "input", "value") == "0"
    specs = chart_specs(report_page)
    lines = [f for f in figures(dom) if f["data-kind"] == "lines"]
    assert lines
    for figure in lines:
        assert figure["data-smoothed-sum"] == figure["data-raw-sum"], figure
        head = finite(specs[figure["id"]]["series"][0]["y"])
        assert float(figure["data-smoothed-first"]) == head[0]
        assert float(figure["data-smoothed-last"]) == head[-1]
    assert assert_smoothed_as_tensorboard(dom, report_page, 0.0) == 0


@needs_chromium
@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("", "0"),
        ("#smoothing=0.6", "0.6"),
        ("?smoothing=0.25", "0.25"),
        ("#train&smoothing=0.5", "0.5"),
        ("#smoothing=5", "0.999"),
        ("#smoothing=oops", "0"),
    ],
)
def test_the_slider_reads_its_value_from_the_address(
    report_page: Path, tmp_path: Path, address: str, shown: str
) -> None:
    """The smoothing slider (and every line chart) takes the value the page's address names,
    clamped to 0..0.999, 0 when it names none."""
    dom = dump_dom(report_page, tmp_path, address)
    assert attribute(dom, "body", "data-errors") == "0"
    assert re.search(rf'<input type="range" id="smoothing"[^>]*\bvalue="{re.escape(shown)}"', dom)
    assert {f["data-smoothing"] for f in figures(dom) if f["data-kind"] == "lines"} == {shown}


@needs_chromium
def test_moving_the_slider_rewrites_the_address_and_an_anchor_keeps_it(
    report_page: Path, tmp_path: Path
) -> None:
    """The page's self-test moves the slider to 0.6: the fragment then says smoothing=0.6 (via
    history.replaceState), the hovered legend shows smoothed and raw values, and following the
    #overview link keeps the smoothing next to the anchor."""
    dom = dump_dom(report_page, tmp_path, "#trainmon-selftest")
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "body", "data-selftest-url") == "#trainmon-selftest&amp;smoothing=0.6"
    assert attribute(dom, "body", "data-selftest-nav") == "#overview&amp;smoothing=0.6"
    assert attribute(dom, "input", "value") == "0.6"
    assert re.search(r'class="u-value">[^<]+ \(raw [^<]+\)<', dom)
    assert 'class="u-series tm-raw"' in dom
    assert assert_smoothed_as_tensorboard(dom, report_page, 0.6) >= 5


def edge_run(base: Path) -> Path:
    """A short trainmon run, then a metric logged once (300 at step 40), a constant, one that
    is only NaN and one with an Infinity."""
    from test_report_summary import build_run

    build_run(base, "edges", 30, seed=5)
    rows = [
        (40, {"other/one_point": 300.0, "other/constant": 7.0, "other/only_nan": "NaN"}),
        (41, {"other/constant": 7.0, "other/only_nan": "NaN", "other/with_inf": 1.0}),
        (42, {"other/constant": 7.0, "other/with_inf": "Infinity"}),
        (43, {"other/constant": 7.0, "other/with_inf": 2.0}),
    ]
    with open(base / "edges" / "metrics.jsonl", "a") as f:
        for step, values in rows:
            record = {"v": 1, "kind": "scalars", "step": step, "time": 2e9 + step, "values": values}
            f.write(json.dumps(record) + "\n")
    return base / "edges"


@needs_chromium
def test_one_point_constant_and_non_finite_series_get_sensible_axes(tmp_path: Path) -> None:
    """A one-point series' axes sit around its point (not 0..600), a constant's y axis is
    padded around it, NaN-only and Infinity series draw with finite axes, smoothed or not."""
    page = write_report([load_run(edge_run(tmp_path))], tmp_path / "edges.html")
    by_metric = {
        chart["series"][0]["metric"]: chart_id
        for chart_id, chart in chart_specs(page).items()
        if chart["kind"] == "lines" and len(chart["series"]) == 1
    }
    for fragment in ("", "#smoothing=0.9"):
        dom = dump_dom(page, tmp_path, fragment)
        assert attribute(dom, "body", "data-errors") == "0"
        drawn = {f["id"]: f for f in figures(dom)}
        assert all(f["data-rendered"] == "1" and int(f["data-ink"]) > 0 for f in drawn.values())
        scale = {
            metric: {k: float(drawn[i][f"data-{k}"]) for k in ("x-min", "x-max", "y-min", "y-max")}
            for metric, i in by_metric.items()
        }
        one = scale["other/one_point"]
        assert one["y-min"] < 300 < one["y-max"] and 0 < one["y-max"] - one["y-min"] <= 150, one
        assert one["x-min"] < 40 < one["x-max"] and one["x-max"] - one["x-min"] <= 10, one
        constant = scale["other/constant"]
        assert constant["y-min"] < 7 < constant["y-max"], constant
        assert constant["y-max"] - constant["y-min"] <= 3.5, constant
        for metric in ("other/only_nan", "other/with_inf"):
            assert all(math.isfinite(v) for v in scale[metric].values()), (metric, scale[metric])
            assert scale[metric]["y-min"] < scale[metric]["y-max"]
        weight = 0.9 if fragment else 0.0
        assert_smoothed_as_tensorboard(dom, page, weight)
    dom = dump_dom(page, tmp_path, "#trainmon-selftest")
    assert attribute(dom, "body", "data-errors") == "0"
    count = len(figures(dom))
    assert attribute(dom, "body", "data-selftest") == f"zoomed {count} reset {count} of {count}"


#: Samples seen per step in :func:`restarted_run` (its ``train/samples`` counter).
BATCH = 8


def restarted_run(base: Path) -> Path:
    """A trainmon journal of two attempts: steps 1-30, then a second Monitor resumed from
    the first's state at step 20 logging 21-40 (loss, step time, a samples counter)."""
    import trainmon

    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base / "runs"), "job_name": "job"},
    }

    def log(monitor: Any, step: int, offset: float) -> None:
        values = {
            "train/loss": offset + 1.0 / step,
            "perf/step_time_ms": 10.0 + step % 3,
            "train/samples": float(BATCH * step),
        }
        monitor.step = step
        monitor.log(values)

    state = None
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 31):
            log(monitor, step, 0.0)
            if step == 20:
                state = monitor.state_dict()
    with trainmon.Monitor(config) as monitor:
        assert state is not None
        monitor.load_state_dict(state)
        for step in range(21, 41):
            log(monitor, step, 0.5)
    return base / "runs" / "job"


@pytest.fixture(scope="module")
def restarted_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of :func:`restarted_run` next to a run without restarts or samples."""
    from test_report_summary import build_run

    base = tmp_path_factory.mktemp("restarts")
    build_run(base, "plain", 40, seed=4)
    runs = [load_run(restarted_run(base)), load_run(base / "plain")]
    return write_report(runs, base / "restarts.html")


def test_the_payload_holds_each_runs_restarts_and_samples_counter(restarted_page: Path) -> None:
    """The restarted run's payload entry names attempt 2 resumed from step 20 at step 21 and
    its samples counter; the plain run has neither."""
    match = re.search(
        r'<script type="application/json" id="trainmon-data">(.*?)</script>',
        restarted_page.read_text(encoding="utf-8"),
        re.S,
    )
    assert match is not None
    restarted, plain = json.loads(match.group(1))["runs"]
    assert restarted["restarts"] == [{"x": 21, "attempt": 2, "label": "resumed from step 20"}]
    assert restarted["samples"]["x"] == list(range(1, 41))
    assert restarted["samples"]["y"] == [BATCH * s for s in range(1, 41)]
    assert plain["restarts"] == [] and plain["samples"] is None


@needs_chromium
def test_every_step_chart_of_a_restarted_run_draws_its_restart_mark(
    restarted_page: Path, tmp_path: Path
) -> None:
    """Every step-axis chart (lines and the stacked breakdown) holding the restarted run
    exposes data-restarts="21" and has drawn one restart line; the plain run's own charts
    have none."""
    specs = chart_specs(restarted_page)
    dom = dump_dom(restarted_page, tmp_path)
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "body", "data-ready") == "1"
    step_charts = [f for f in figures(dom) if specs[f["id"]]["xUnit"] == "step"]
    with_restart = [f for f in step_charts if 0 in specs[f["id"]]["runs"]]
    assert {specs[f["id"]]["kind"] for f in with_restart} == {"lines", "stacked"}
    for figure in with_restart:
        assert figure["data-restarts"] == "21", figure
        assert figure["data-restarts-drawn"] == "1", figure
        assert figure["data-x-unit"] == "step"
    alone = [f for f in step_charts if specs[f["id"]]["runs"] == [1]]
    assert alone
    for figure in alone:
        assert figure["data-restarts"] == "" and figure["data-restarts-drawn"] == "0", figure


@needs_chromium
def test_the_x_axis_in_the_address_redraws_the_step_charts_over_samples(
    restarted_page: Path, tmp_path: Path
) -> None:
    """#smoothing=0.6&x=samples draws the restarted run's line charts over samples seen
    (x range about 8-320, the restart mark at 168 still drawn, the control showing samples);
    charts with a run lacking a samples counter, and the breakdown, stay on steps; an x the
    page does not know (x=oops) falls back to steps."""
    specs = chart_specs(restarted_page)
    ranges: dict[str, dict[str, dict[str, float]]] = {}
    for fragment in ("#smoothing=0.6", "#smoothing=0.6&x=samples", "#x=oops"):
        dom = dump_dom(restarted_page, tmp_path, fragment)
        assert attribute(dom, "body", "data-errors") == "0"
        assert attribute(dom, "body", "data-ready") == "1"
        drawn = {f["id"]: f for f in figures(dom) if specs[f["id"]]["xUnit"] == "step"}
        ranges[fragment] = {
            i: {"min": float(f["data-x-min"]), "max": float(f["data-x-max"])}
            for i, f in drawn.items()
        }
        samples = fragment.endswith("x=samples")
        shown = "samples" if samples else "step"
        assert re.search(rf'<option value="{shown}" selected="">', dom), fragment
        for chart_id, figure in drawn.items():
            spec = specs[chart_id]
            moved = samples and spec["kind"] == "lines" and spec["runs"] == [0]
            assert figure["data-x-unit"] == ("samples" if moved else "step"), (fragment, figure)
            if spec["runs"] == [0]:
                assert figure["data-restarts-drawn"] == "1", (fragment, figure)
            if spec["kind"] == "lines" and "smoothing" in fragment:
                assert float(figure["data-smoothing"]) == 0.6
    moved_ids = [i for i, spec in specs.items() if spec["kind"] == "lines" and spec["runs"] == [0]]
    assert moved_ids
    for chart_id in moved_ids:
        steps = ranges["#smoothing=0.6"][chart_id]
        samples = ranges["#smoothing=0.6&x=samples"][chart_id]
        assert steps["min"] <= 1 and 40 <= steps["max"] < 100, steps
        assert samples["min"] <= BATCH and BATCH * 40 <= samples["max"] < 2 * BATCH * 40, samples
    for chart_id, steps in ranges["#smoothing=0.6"].items():
        assert ranges["#x=oops"][chart_id] == steps
        if chart_id not in moved_ids:
            assert ranges["#smoothing=0.6&x=samples"][chart_id] == steps
