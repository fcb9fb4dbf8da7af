"""The write-path benchmark scripts, split by what they compare, still answer through the shared
harness: a contender's worker in a fresh process logs the scalars asked for, and the
DeepSpeed-style copy writes what DeepSpeed's monitor writes (read back with csv and
TensorBoard's reader)."""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SRC = BENCHMARKS.parent / "src"


@pytest.fixture
def bench_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import as the scripts do: ``benchmarks/`` first on ``sys.path``; workers find trainmon."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    for name in [m for m in sys.modules if m == "harness" or m.startswith("write_path")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.slow
@pytest.mark.usefixtures("bench_path")
def test_contender_worker_logs_every_scalar_in_a_fresh_process(tmp_path: Path) -> None:
    harness = importlib.import_module("harness")
    for key in ("floor", "trainmon_tb_jsonl"):
        result = harness.run_worker(
            BENCHMARKS / "bench_write_path.py",
            ["--worker", key, "--steps", "50", "--repeats", "2", "--folder", str(tmp_path / key)],
        )
        assert "samples" in result, result
        assert [s["scalars"] for s in result["samples"]] == [400, 400]  # 50 steps x 8 names
        assert all(s["dropped"] == 0 and s["call_cpu_ns"] > 0 for s in result["samples"])


@pytest.mark.usefixtures("bench_path")
def test_deepspeed_style_copy_writes_csv_per_metric_and_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    style = importlib.import_module("write_path.deepspeed_style")
    monitor = style.DeepSpeedStyleMonitor(tmp_path)
    for step in range(3):
        monitor.write_events([("Train/loss", 1.0 + step, step), ("Train/lr", 0.1, step)])
    monitor.close()
    with open(tmp_path / "ds_csv" / "bench" / "Train_loss.csv", newline="") as f:
        assert list(csv.reader(f)) == [["step", "loss"], ["0", "1.0"], ["1", "2.0"], ["2", "3.0"]]
    events = EventAccumulator(str(tmp_path / "ds_tb" / "bench"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("Train/loss")] == [
        (0, 1.0),
        (1, 2.0),
        (2, 3.0),
    ]


def _deepspeed_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<script>`` on the CPU accelerator with this checkout's trainmon."""
    env = dict(os.environ, PYTHONPATH=str(SRC), DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.parametrize("script", ["bench_deepspeed.py", "bench_attach.py"])
def test_deepspeed_benchmarks_quick_run_reports_wall_overheads(script: str, tmp_path: Path) -> None:
    """``--quick``: ``bench_deepspeed.py``'s workers in their own processes, ``bench_attach.py``
    attaching and detaching block by block on one engine, answer every block, and the
    comparison against bare (wall, with its interval) reaches the JSON and the table."""
    pytest.importorskip("deepspeed")
    out = tmp_path / "result.json"
    result = _deepspeed_benchmark(script, "--quick", "--only", "attach-nothing", "--json", str(out))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "| attach-nothing / bare" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["contender"], r["baseline"]) for r in rows] == [("attach-nothing", "bare")]
    low, high = rows[0]["wall"][1]
    assert low <= rows[0]["wall"][0] <= high


@pytest.mark.slow
def test_attach_benchmark_refuses_a_contender_that_needs_another_engine() -> None:
    """``bench_attach.py --only ds``: DeepSpeed's own monitor needs another engine config."""
    pytest.importorskip("deepspeed")
    refused = _deepspeed_benchmark("bench_attach.py", "--quick", "--only", "ds")
    assert refused.returncode == 2 and "['ds'] cannot run on the bare engine" in refused.stderr


@pytest.mark.slow
def test_background_benchmark_quick_run_reports_what_a_wake_up_costs() -> None:
    """``bench_background.py --quick``: the three tables, the last with a positive CPU figure
    per kind of wake-up."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_background.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "| TB+CSV+JSONL @ 1 s" in result.stdout
    assert "| C (releases the GIL)" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| Event set by")]
    assert len(rows) == 1 and float(rows[0].split("|")[2]) > 0


@pytest.mark.slow
def test_frameworks_benchmark_interleaves_the_real_loops(tmp_path: Path) -> None:
    """``bench_frameworks.py --quick``: each framework's real loop ran every variant's blocks in
    turn, and trainmon's driver took values without dropping any."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = tmp_path / "frameworks.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_frameworks.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    frameworks = json.loads(out.read_text())["frameworks"]
    assert set(frameworks) == {"transformers", "lightning", "accelerate"}
    for name, answer in frameworks.items():
        assert "error" not in answer, (name, answer)
        assert {len(blocks) for blocks in answer["blocks"].values()} == {3}, name  # the rounds
        assert all(wall > 0 and cpu > 0 for wall, cpu in answer["blocks"]["trainmon"]), name
        seen, dropped = answer["logged"]["trainmon"]
        assert seen > 0 and dropped == 0, (name, seen, dropped)
        assert answer["logged"]["bare"] == [0, 0], name
    rows = [line for line in result.stdout.splitlines() if line.startswith("| trainmon ")]
    assert len(rows) == 3, result.stdout  # one table per framework


def test_capture_benchmark_times_the_calls_as_users_write_them(tmp_path: Path) -> None:
    """The README's pattern (pairs after ``monitor.step = k``, and triples), tight and with a
    wait between calls, against torch.stack; every contender has a ratio and the JSON holds
    the long run's tenths."""
    out = tmp_path / "capture.json"
    args = ["--as-called-only", "--rounds", "2", "--calls", "50", "--op-calls", "20"]
    args += ["--flat-calls", "2000", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_capture.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    for setting in ("tight", "op"):
        assert f"as users call it, {setting}" in done.stdout
    result = json.loads(out.read_text())["as_called"]
    cases = {s["setting"]: s["cases"] for s in result["settings"]}
    for setting in ("tight", "op"):
        assert set(cases[setting]) == {"pairs", "triples", "floor: torch.stack"}
        assert all(case["ratio"] > 0 for case in cases[setting].values())
    assert len(result["flat"]["tenths"]) == 10
