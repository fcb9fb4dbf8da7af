"""Summary and compare figures, checked against values computed here from what was logged."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from pathlib import Path

import orjson
import pytest

import trainmon
from trainmon.alerts import Alert
from trainmon.cli import main
from trainmon.report import compare, load_run, summarize

PARTS = {
    "forward": "perf/forward_ms",
    "backward": "perf/backward_ms",
    "optimizer": "perf/optimizer_ms",
    "comm": "perf/comm_ms",
    "data": "perf/data_ms",
}
WINDOW = 25
SAMPLES_PER_STEP = 64

Logged = dict[str, list[tuple[int, float]]]
TwoRuns = tuple[Path, Logged, Path, Logged]


def build_run(folder: Path, job: str, steps: int, seed: int, slow: float = 1.0) -> Logged:
    """A training-like run written by trainmon.Monitor (journal only); returns what it logged.

    ``slow`` scales every time, so a second run differs in step time and throughput.
    """
    config = {
        "steps_per_print": WINDOW,
        "jsonl": {"enabled": True, "output_path": str(folder), "job_name": job},
        "console": {"enabled": False},
    }
    rng = random.Random(seed)
    logged: Logged = {}
    with trainmon.Monitor(config) as monitor:
        for step in range(1, steps + 1):
            parts = {
                "perf/forward_ms": slow * (10 + rng.random()),
                "perf/backward_ms": slow * (20 + 2 * rng.random()),
                "perf/optimizer_ms": slow * 5.0,
                "perf/comm_ms": slow * (3 + rng.random()),
                "perf/data_ms": slow * 0.5,
            }
            step_ms = sum(parts.values()) + slow * rng.random()
            values = {
                "train/loss": 3.0 * math.exp(-step / 80) + 0.01 * rng.random(),
                "train/lr": 1e-3 * min(1.0, step / 20),
                "train/grad_norm": 1.0 + rng.random(),
                "perf/step_time_ms": step_ms,
                "perf/samples_per_sec": SAMPLES_PER_STEP * 1000.0 / step_ms,
                "mem/allocated_mb": 2000.0 + 10 * (step % 7),
                "mem/peak_allocated_mb": 2100.0 + step,
                **parts,
            }
            if step == 17:
                values["train/grad_norm"] = math.nan
            if step % WINDOW == 0:
                spread = rng.random()
                values.update(
                    {
                        "perf/step_time_ms/min": step_ms - 1 - spread,
                        "perf/step_time_ms/mean": step_ms,
                        "perf/step_time_ms/max": step_ms + 2 + spread,
                        "perf/step_time_ms/argmax_rank": 3,
                        "perf/slowest_rank": 3 if step % (2 * WINDOW) else 1,
                        "perf/straggler_ratio": 1.1 + spread / 10,
                        "eval/loss": 2.5 * math.exp(-step / 90),
                    }
                )
            monitor.step = step
            monitor.write_events(list(values.items()))
            for name, value in values.items():
                logged.setdefault(name, []).append((step, float(value)))
    return logged


def write_alerts(run_dir: Path, alerts: list[Alert]) -> None:
    """``alerts.jsonl`` as the file sink writes it: one ``Alert.as_dict()`` per line."""
    with open(run_dir / "alerts.jsonl", "w") as f:
        for alert in alerts:
            f.write(json.dumps(alert.as_dict()) + "\n")


def alert(rule: str, state: str, step: int) -> Alert:
    """An alert about the step time at ``step``."""
    return Alert(
        rule=rule,
        kind="threshold",
        state=state,  # type: ignore[arg-type]
        message=f"{rule} {state} at step {step}",
        metric="perf/step_time_ms",
        value=1.0,
        step=step,
        time=1_700_000_000.0 + step,
    )


def finite(values: list[tuple[int, float]]) -> list[float]:
    """The finite values of a logged series."""
    return [v for _, v in values if math.isfinite(v)]


def samples_per_second(logged: Logged) -> float:
    """The run's throughput as counted: samples of every step over the sum of step times."""
    steps = len(logged["perf/step_time_ms"])
    return SAMPLES_PER_STEP * steps / (math.fsum(finite(logged["perf/step_time_ms"])) / 1000)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    """Run A (120 steps) and run B (100 steps, 1.5x slower), each with alerts."""
    base = tmp_path_factory.mktemp("runs")
    logged_a = build_run(base, "run-a", 120, seed=1)
    logged_b = build_run(base, "run-b", 100, seed=2, slow=1.5)
    write_alerts(
        base / "run-a",
        [alert("slow-step", "firing", 50), alert("slow-step", "resolved", 60)],
    )
    write_alerts(
        base / "run-b",
        [
            alert("slow-step", "firing", 30),
            alert("nan-grad", "firing", 17),
            alert("slow-step", "firing", 90),
        ],
    )
    return base / "run-a", logged_a, base / "run-b", logged_b


def test_every_metric_statistic_matches_the_logged_values(two_runs: TwoRuns) -> None:
    """last/min/max/mean/count of every metric equal those of the values the loop logged;
    NaN is counted apart and kept out of min/max/mean."""
    path, logged, _, _ = two_runs
    summary = summarize(load_run(path))
    assert {m.name for m in summary.metrics} == set(logged)
    for name, values in logged.items():
        m = summary.metric(name)
        assert m is not None
        good = finite(values)
        assert m.count == len(values)
        assert m.nonfinite == len(values) - len(good)
        assert m.first_step == values[0][0] and m.last_step == values[-1][0]
        assert m.min == min(good) and m.max == max(good)
        if name == "perf/samples_per_sec":  # a rate: samples over time, not a mean of rates
            assert m.mean == pytest.approx(samples_per_second(logged), rel=1e-12)
        else:
            assert m.mean == pytest.approx(statistics.fmean(good), rel=1e-12)
        assert m.last == values[-1][1]
    assert summary.metric("train/grad_norm").nonfinite == 1  # type: ignore[union-attr]


def test_key_figures_match_independent_computation(two_runs: TwoRuns) -> None:
    """Loss, step-time breakdown shares, throughput, peak memory, rank spread, slowest rank
    and alerts are what this test computes from the logged values and alerts.jsonl."""
    path, logged, _, _ = two_runs
    s = summarize(load_run(path))

    def mean(name: str) -> float:
        return statistics.fmean(finite(logged[name]))

    assert s.steps == 120 and s.first_step == 1 and s.last_step == 120
    assert s.loss is not None
    assert s.loss["final"] == logged["train/loss"][-1][1]
    assert s.loss["mean"] == pytest.approx(mean("train/loss"), rel=1e-12)
    assert s.step_time_ms == pytest.approx(mean("perf/step_time_ms"), rel=1e-12)
    shares = {p.label: p.percent for p in s.breakdown}
    assert list(shares) == [*PARTS, "other"]
    for label, metric in PARTS.items():
        expected = 100 * mean(metric) / mean("perf/step_time_ms")
        assert shares[label] == pytest.approx(expected, rel=1e-9)
    unnamed = statistics.fmean(  # the time the loop added outside the named parts
        step_ms - math.fsum(logged[metric][i][1] for metric in PARTS.values())
        for i, (_, step_ms) in enumerate(logged["perf/step_time_ms"])
    )
    other = s.breakdown[-1]
    assert other.metric == "" and other.mean_ms == pytest.approx(unnamed, rel=1e-9)
    assert sum(shares.values()) == pytest.approx(100)
    throughput = {f.label: f.value for f in s.throughput}
    assert throughput["samples/s"] == pytest.approx(samples_per_second(logged), rel=1e-12)
    assert s.peak_memory is not None
    assert s.peak_memory.metric == "mem/peak_allocated_mb"
    assert s.peak_memory.value == max(finite(logged["mem/peak_allocated_mb"]))
    assert s.ranks is not None
    spread = s.ranks.spreads[0]
    assert spread.metric == "perf/step_time_ms"
    assert spread.min == pytest.approx(mean("perf/step_time_ms/min"), rel=1e-12)
    assert spread.max == pytest.approx(mean("perf/step_time_ms/max"), rel=1e-12)
    expected_spread = (
        100 * (mean("perf/step_time_ms/max") - mean("perf/step_time_ms/min"))
    ) / mean("perf/step_time_ms/mean")
    assert spread.spread_percent == pytest.approx(expected_spread, rel=1e-9)
    ranks = Counter(int(v) for _, v in logged["perf/slowest_rank"])
    rank, hits = ranks.most_common(1)[0]
    assert s.ranks.slowest_rank == rank
    assert s.ranks.slowest_share == pytest.approx(hits / sum(ranks.values()))
    assert s.ranks.straggler_ratio_max == max(finite(logged["perf/straggler_ratio"]))
    assert s.alerts.fired == 1 and s.alerts.resolved == 1
    assert s.alerts.by_rule == {"slow-step": 1} and s.alerts.still_firing == []
    assert [f.metric for f in s.evals] == ["eval/loss"]


def test_summary_command_prints_the_same_figures(
    two_runs: TwoRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    """`trainmon summary RUN --json` carries the figures; the table shows each metric and the
    breakdown, throughput, memory, ranks and alerts lines."""
    path, logged, _, _ = two_runs
    assert main(["summary", str(path), "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["run"] == "run-a" and data["steps"] == 120
    by_name = {m["name"]: m for m in data["metrics"]}
    assert by_name["train/loss"]["max"] == max(finite(logged["train/loss"]))
    assert by_name["train/grad_norm"]["nonfinite"] == 1
    assert main(["summary", str(path)]) == 0
    text = capsys.readouterr().out
    for name in logged:
        assert f"\n  {name} " in text
    assert "train/grad_norm" in text and "(1 non-finite)" in text
    for line in ("step time", "throughput", "peak memory", "ranks", "alerts"):
        assert f"\n{line}" in text
    assert "slowest rank 3" in text
    assert "1 fired (slow-step x1), 1 resolved" in text
    shares = summarize(load_run(path)).breakdown
    assert f"{shares[0].percent:.1f}%" in text


def test_compare_gives_both_runs_and_the_relative_change(
    two_runs: TwoRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare rows hold A's and B's figures and (B - A) / |A|, computed here independently."""
    path_a, logged_a, path_b, logged_b = two_runs
    rows = {
        r.label.strip(): r
        for r in compare(summarize(load_run(path_a)), summarize(load_run(path_b)))
    }

    def mean(logged: Logged, name: str) -> float:
        return statistics.fmean(finite(logged[name]))

    expected = {
        "final loss": (logged_a["train/loss"][-1][1], logged_b["train/loss"][-1][1]),
        "mean loss": (mean(logged_a, "train/loss"), mean(logged_b, "train/loss")),
        "samples/s": (samples_per_second(logged_a), samples_per_second(logged_b)),
        "step time": (mean(logged_a, "perf/step_time_ms"), mean(logged_b, "perf/step_time_ms")),
        "backward": (mean(logged_a, "perf/backward_ms"), mean(logged_b, "perf/backward_ms")),
        "peak memory": (
            max(finite(logged_a["mem/peak_allocated_mb"])),
            max(finite(logged_b["mem/peak_allocated_mb"])),
        ),
        "alerts fired": (1.0, 3.0),
        "steps": (120.0, 100.0),
    }
    for label, (a, b) in expected.items():
        row = rows[label]
        assert row.values[0] == pytest.approx(a, rel=1e-12), label
        assert row.values[1] == pytest.approx(b, rel=1e-12), label
        assert row.change == pytest.approx((b - a) / abs(a), rel=1e-9), label
    step_change = rows["step time"].change
    assert step_change is not None and step_change > 0.4  # B is 1.5x slower
    assert main(["compare", str(path_a), str(path_b), "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["a"]["run"] == "run-a" and data["b"]["run"] == "run-b"
    step = next(r for r in data["rows"] if r["label"] == "step time")
    assert step["change"] == pytest.approx(step_change)
    assert main(["compare", str(path_a), str(path_b)]) == 0
    text = capsys.readouterr().out
    assert "A  run-a" in text and "B  run-b" in text
    assert f"{100 * step_change:+.1f}%" in text


def test_runs_with_disjoint_metrics_compare_without_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs sharing no metric compare as '-' for what a run lacks, with no change."""
    for job, name in (("left", "train/loss"), ("right", "eval/acc")):
        config = {
            "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": job},
            "console": {"enabled": False},
        }
        with trainmon.Monitor(config) as monitor:
            for step in range(5):
                monitor.step = step
                monitor.write_events([(name, float(step))])
    assert main(["compare", str(tmp_path / "left"), str(tmp_path / "right")]) == 0
    text = capsys.readouterr().out
    assert "final loss" in text and "eval/acc (last)" in text
    final = next(line for line in text.splitlines() if line.startswith("final loss"))
    assert final.split()[-2:] == ["-", "-"]
