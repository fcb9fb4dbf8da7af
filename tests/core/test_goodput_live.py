"""Goodput while the job runs: ``trainmon/goodput`` (the run so far), ``trainmon/goodput_window``
(a rolling window) and the badput parts, at each window's end, in the journal, TensorBoard,
Prometheus and the console line, usable by alert rules; and at the end of a run within 2
points of what ``trainmon goodput`` says of the same files."""

from __future__ import annotations

import json
import time
import urllib.request
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.cli import main
from trainmon.journal import read_journal

PRE_S, STARTUP_S, STEP_S, SAVE_S, STEPS = 0.4, 0.3, 0.02, 0.2, 40


def _train(config: dict[str, Any], steps: int = STEPS) -> float:
    """Start-up before and after the Monitor exists, timed steps, a checkpoint save at step
    20; returns the time the run began (its clock's start)."""
    began = time.time()
    trainmon.mark_start(began)
    time.sleep(PRE_S)  # imports, model building: before any Monitor
    with trainmon.Monitor(config) as monitor:
        time.sleep(STARTUP_S)
        for step in range(1, steps + 1):
            started = time.time()
            time.sleep(STEP_S)
            monitor.step = step
            monitor.log(
                {"train/loss": 1.0 / step, "perf/step_time_ms": (time.time() - started) * 1e3}
            )
            if step == 20:
                with monitor.span("checkpoint_save"):
                    time.sleep(SAVE_S)
    return began


def _config(base: Path, **trainmon_settings: Any) -> dict[str, Any]:
    return {
        "steps_per_print": 10,
        "console": {"enabled": True},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "tensorboard": {"enabled": True, "output_path": str(base / "tb"), "job_name": "job"},
        "trainmon": {"live_goodput": True, **trainmon_settings},
    }


def _series(run: Path, name: str) -> list[tuple[int, float]]:
    return [
        (r["step"], r["values"][name])
        for r in read_journal(run)
        if r["kind"] == "scalars" and name in r["values"]
    ]


def test_the_live_gauge_matches_trainmon_goodput_at_the_end_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At each window's end the journal, TensorBoard and the console carry the goodput so far;
    the last value is within 2 points of `trainmon goodput` on the same journal, and the
    start-up and checkpoint shares hold the sleeps the test made."""
    began = _train(_config(tmp_path))
    ended = time.time()
    run = tmp_path / "job"
    live = _series(run, "trainmon/goodput")
    assert [step for step, _ in live] == [10, 20, 30, 40]
    assert all(0 < a < b < 1 for (_, a), (_, b) in pairwise(live))
    console = capsys.readouterr().out
    assert "goodput " in console and "badput" not in console  # the parts stay in the files
    assert main(["goodput", str(run), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert abs(live[-1][1] - figures["goodput"]) <= 0.02, (live[-1], figures["goodput"])
    wall = ended - began
    startup = _series(run, "trainmon/badput/startup")[-1][1] * figures["wall_s"]
    assert PRE_S + STARTUP_S <= startup <= PRE_S + STARTUP_S + 0.2 + 0.05 * wall
    saved = _series(run, "trainmon/badput/checkpoint_save")[-1][1] * figures["wall_s"]
    assert SAVE_S * 0.95 <= saved <= SAVE_S + 0.1

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "job"), size_guidance={"scalars": 0})
    acc.Reload()
    shown = [(e.step, e.value) for e in acc.Scalars("trainmon/goodput")]
    assert shown == [(s, pytest.approx(v, abs=1e-6)) for s, v in live]


def test_the_rolling_window_forgets_the_start_up(tmp_path: Path) -> None:
    """With a 0.3 s rolling window, the start-up long past: the window's goodput is near the
    steps' share (no start-up in it) while the run-so-far goodput still carries it."""
    _train(_config(tmp_path, goodput_window_s=0.3), steps=60)
    run = tmp_path / "job"
    so_far = _series(run, "trainmon/goodput")[-1][1]
    recent = _series(run, "trainmon/goodput_window")[-1][1]
    assert recent > 0.85 > so_far
    assert _series(run, "trainmon/badput_window/startup")[-1][1] == 0.0


def test_an_alert_rule_fires_on_the_live_goodput(tmp_path: Path) -> None:
    """A threshold rule on trainmon/goodput (< 0.9) fires like a rule on any metric."""
    config = _config(tmp_path)
    config["alerts"] = {
        "rules": [
            {"name": "low-goodput", "metric": "trainmon/goodput", "op": "<", "threshold": 0.9}
        ],
        "sinks": [{"type": "file"}],
    }
    _train(config, steps=20)
    lines = (tmp_path / "job" / "alerts.jsonl").read_text().splitlines()
    fired = [json.loads(line) for line in lines]
    assert any(a["rule"] == "low-goodput" and a["state"] == "firing" for a in fired), fired


@pytest.mark.skipif(
    not trainmon.extras.is_installed("prometheus_client"),
    reason='needs pip install "trainmon[prometheus]"',
)
def test_prometheus_serves_the_live_goodput_as_a_gauge(tmp_path: Path) -> None:
    """The exporter serves trainmon/goodput as a gauge Grafana can alert on, equal to the
    journal's last value."""
    from prometheus_client.parser import text_string_to_metric_families

    config = _config(tmp_path)
    config["prometheus"] = {"enabled": True, "port": 0}
    with trainmon.Monitor(config) as monitor:
        (writer,) = [w for w in monitor.writers if w.kind == "prometheus"]
        for step in range(1, 11):
            time.sleep(STEP_S)
            monitor.log({"perf/step_time_ms": STEP_S * 1e3}, step=step)
        assert monitor.flush(timeout=30)
        with urllib.request.urlopen(writer.url, timeout=10) as response:
            text = response.read().decode()
    gauge = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "trainmon_trainmon_goodput"
    ]
    assert gauge == [pytest.approx(_series(tmp_path / "job", "trainmon/goodput")[-1][1])]
