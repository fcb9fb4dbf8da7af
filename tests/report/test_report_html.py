"""The HTML report as a file: self-contained, escaped, grouped by family, small for big runs."""

from __future__ import annotations

import math
import random
import re
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest

from trainmon.cli import main
from trainmon.report import FAMILIES, Run, Series, load_run, render_report, write_report

DATA_RE = re.compile(r'<script type="application/json" id="trainmon-data">(.*?)</script>', re.S)


def payload(page: str) -> dict[str, Any]:
    """The JSON the page's charts are drawn from."""
    match = DATA_RE.search(page)
    assert match is not None
    data: dict[str, Any] = orjson.loads(match.group(1))
    return data


def synthetic(name: str, metrics: dict[str, list[float]], start: int = 1) -> Run:
    """A run built in memory: each metric at steps start, start+1, ..."""
    run = Run(name=name, path=Path(name), source="test")
    for metric, values in metrics.items():
        steps = list(range(start, start + len(values)))
        run.series[metric] = Series(metric, steps, values)
    run.step_count = max(len(v) for v in metrics.values())
    return run


def every_family_run(name: str = "run", n: int = 300, seed: int = 0) -> Run:
    """A run with metrics of every family, the step-time parts, and cross-rank statistics."""
    rng = random.Random(seed)

    def noise(scale: float, offset: float = 0.0) -> list[float]:
        return [offset + scale * rng.random() for _ in range(n)]

    return synthetic(
        name,
        {
            "train/loss": [2 * math.exp(-i / 50) for i in range(n)],
            "train/lr": [1e-3] * n,
            "train/grad_norm": noise(1, 0.5),
            "eval/accuracy": noise(0.1, 0.8),
            "perf/step_time_ms": noise(5, 40),
            "perf/forward_ms": noise(1, 10),
            "perf/backward_ms": noise(2, 20),
            "perf/samples_per_sec": noise(100, 1500),
            "perf/job_samples_per_sec": noise(400, 6000),
            "perf/step_time_ms/min": noise(1, 38),
            "perf/step_time_ms/mean": noise(1, 40),
            "perf/step_time_ms/max": noise(1, 43),
            "perf/step_time_ms/argmax_rank": [3.0] * n,
            "mem/allocated_mb": noise(10, 2000),
            "mem/peak_allocated_mb": noise(10, 2100),
            "comm/all_reduce/latency_ms": noise(1, 3),
            "custom_metric": noise(1),
        },
    )


def test_the_report_is_one_file_that_needs_no_network(tmp_path: Path) -> None:
    """No external script, style, font or image; uPlot and its CSS are inline; the vendored
    files and their MIT license ship with the package."""
    page = render_report([every_family_run()])
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(http" not in page
    vendor = resources.files("trainmon.report").joinpath("vendor")
    code = vendor.joinpath("uPlot.iife.min.js").read_text()
    assert code in page and vendor.joinpath("uPlot.min.css").read_text() in page
    assert "MIT" in vendor.joinpath("LICENSE").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_one_section_per_family_with_sensible_charts() -> None:
    """Each family present gets a section; the breakdown is stacked, memory metrics share a
    chart, samples/s shares with job samples/s, cross-rank statistics become a band."""
    page = render_report([every_family_run()])
    charts = payload(page)["charts"]
    for family in FAMILIES:
        assert f'<section class="family" id="{family}" data-family="{family}">' in page
        assert any(c["family"] == family for c in charts), family
    by_title = {c["title"]: c for c in charts}
    stacked = by_title["step time breakdown"]
    assert stacked["kind"] == "stacked" and stacked["family"] == "perf"
    assert [p["label"] for p in stacked["stack"]["parts"]] == ["forward", "backward", "other"]
    assert stacked["stack"]["total"]["metric"] == "perf/step_time_ms"
    memory = by_title["memory (MB)"]
    assert {s["metric"] for s in memory["series"]} == {"mem/allocated_mb", "mem/peak_allocated_mb"}
    assert {s["metric"] for s in by_title["samples/s"]["series"]} == {
        "perf/samples_per_sec",
        "perf/job_samples_per_sec",
    }
    band = by_title["perf/step_time_ms across ranks (min–max, mean)"]
    assert band["kind"] == "band" and band["bands"][0]["mean"] is not None
    drawn = {s["metric"] for c in charts if c["kind"] == "lines" for s in c["series"]}
    assert "perf/step_time_ms/argmax_rank" not in drawn
    assert "perf/step_time_ms/min" not in drawn  # in the band, not a line of its own
    assert {"train/loss", "train/lr", "train/grad_norm", "custom_metric"} <= drawn
    for chart in charts:
        assert f'id="{chart["id"]}"' in page


def test_the_breakdown_shows_the_time_outside_the_parts_as_other() -> None:
    """The stacked chart and the overview end the breakdown with "other": per step the step
    time the parts leave uncovered (the 3 ms this run adds), 0 where the parts exceed the step."""
    forward = [10.0, 12.0, 11.0, 30.0]
    backward = [20.0, 21.0, 22.0, 40.0]
    extra = [3.0, 3.0, 3.0, -5.0]  # the last step's parts add up to more than the step
    step = [f + b + e for f, b, e in zip(forward, backward, extra, strict=True)]
    run = synthetic(
        "run",
        {"perf/step_time_ms": step, "perf/forward_ms": forward, "perf/backward_ms": backward},
    )
    page = render_report([run])
    stacked = next(c for c in payload(page)["charts"] if c["kind"] == "stacked")
    other = stacked["stack"]["parts"][-1]
    assert other["label"] == "other"
    assert other["values"] == pytest.approx([3.0, 3.0, 3.0, 0.0])
    share = 100 * (sum(step) - sum(forward) - sum(backward)) / sum(step)
    assert re.search(rf"<tr><td>other</td><td>[^<]* ms · {share:.1f}%</td></tr>", page)


def test_several_runs_overlay_with_a_legend_and_disjoint_metrics_still_chart() -> None:
    """The same metric of two runs shares a chart, labelled by run; a metric only one run has
    gets a chart with that run alone."""
    a = synthetic("alpha", {"train/loss": [3.0, 2.0, 1.0], "eval/acc": [0.1, 0.2]})
    b = synthetic("beta", {"train/loss": [2.5, 1.5], "other/thing": [1.0]})
    charts = payload(render_report([a, b]))["charts"]
    loss = next(c for c in charts if c["title"] == "train/loss")
    assert [s["label"] for s in loss["series"]] == ["alpha", "beta"]
    assert loss["series"][0]["color"] != loss["series"][1]["color"]
    acc = next(c for c in charts if c["title"] == "eval/acc")
    assert [s["run"] for s in acc["series"]] == [0]


def test_hostile_names_and_messages_are_escaped() -> None:
    """Metric names, run names and alert messages cannot inject markup or end the script."""
    evil = "</script><script>alert(1)</script>"
    run = synthetic("<b>run</b>", {f"train/{evil}": [1.0, 2.0], "train/loss": [1.0, math.nan]})
    run.alerts = [{"rule": "<i>r</i>", "state": "firing", "message": evil, "step": 2}]
    page = render_report([run])
    assert evil not in page and "<b>run</b>" not in page and "<i>r</i>" not in page
    data = payload(page)
    assert any(s["metric"] == f"train/{evil}" for c in data["charts"] for s in c.get("series", []))
    assert data["alerts"][0]["message"] == evil


def test_a_million_scalars_make_a_small_file_that_keeps_spikes(tmp_path: Path) -> None:
    """1,000,000 values (10 metrics x 100,000 steps) give a report of a few MB; a one-step
    spike is in the chart data; NaN values are marked."""
    rng = random.Random(1)
    names = [f"train/m{i}" for i in range(5)] + [f"perf/x{i}_ms" for i in range(5)]
    metrics = {name: [rng.random() for _ in range(100_000)] for name in names}
    metrics["train/m0"][54_321] = 1e6
    metrics["train/m1"][99] = math.nan
    path = write_report([synthetic("big", metrics)], tmp_path / "big.html")
    size = path.stat().st_size
    assert size < 5_000_000, size
    charts = payload(path.read_text())["charts"]
    series = {s["metric"]: s for c in charts for s in c.get("series", [])}
    spike = series["train/m0"]
    assert 54_322 in spike["x"] and 1e6 in spike["y"]
    assert all(len(s["x"]) <= 2 * 2000 + 2 + s["nonfiniteCount"] for s in series.values())
    assert series["train/m1"]["nonfinite"] == [100] and series["train/m1"]["nonfiniteCount"] == 1
    assert any(c["downsampled"] for c in charts)


def test_report_command_writes_the_file_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`trainmon report RUN -o FILE` writes FILE (readable by others) and prints its path."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(
        '{"v": 1, "kind": "scalars", "step": 1, "time": 1.0, "values": {"train/loss": 2.0}}\n'
        '{"v": 1, "kind": "scalars", "step": 2, "time": 2.0, "values": {"train/loss": "NaN"}}\n'
    )
    out = tmp_path / "sub" / "r.html"
    assert main(["report", str(folder), "-o", str(out), "--title", "My <run>"]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    assert "<title>My &lt;run&gt;</title>" in page
    assert out.stat().st_mode & 0o044  # not mkstemp's private 0600
    assert load_run(folder).series["train/loss"].steps == [1, 2]


@pytest.mark.parametrize("content", [b"", b'{"v": 1, "kind": "meta", "job": "j"}\n'])
def test_report_of_an_empty_run_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    """A journal with no values yet: exit 1, a message naming the file, no HTML written."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "metrics.jsonl").write_bytes(content)
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert "no metric values yet" in err and str(folder) in err
    assert not (tmp_path / "r.html").exists()
