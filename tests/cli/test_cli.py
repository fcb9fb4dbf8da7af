"""The ``trainmon`` command: the demo end to end, and its message without torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon

pytestmark = pytest.mark.slow


def test_demo_writes_every_output_and_says_where(tmp_path: Path) -> None:
    """`python -m trainmon demo` trains, prints progress and the tensorboard command, logs
    train/, perf/ and mem/ metrics to TensorBoard, CSV and JSONL, and ends by writing the
    report of its own run and printing its path."""
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "trainmon", "demo", "-o", str(out), "--steps", "120"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # the demo knows its length: the line shows progress, elapsed time and the ETA
    assert re.search(r"^step 50/120 \(42%\) · elapsed \S+ · ETA \S+ \| loss ", result.stdout, re.M)
    assert f"tensorboard --logdir {out.resolve() / 'tensorboard'}" in result.stdout
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "perf/step_time_ms", "mem/rss_mb"} <= tags
    assert len(acc.Scalars("train/loss")) == 120
    assert (out / "csv" / "train_loss.csv").read_text().startswith("step,loss\n")
    steps = [r["step"] for r in trainmon.read_journal(out) if "train/loss" in r.get("values", {})]
    assert steps == list(range(1, 121))
    losses = [
        r["values"]["train/loss"]
        for r in trainmon.read_journal(out)
        if r["kind"] == "scalars"
        if "train/loss" in r["values"]
    ]
    assert sum(losses[-10:]) < sum(losses[:10])  # the demo model actually learns
    report = out.resolve() / "report.html"
    assert result.stdout.rstrip().endswith(str(report))
    page = report.read_text()
    assert 'data-family="train"' in page and 'data-family="perf"' in page
    assert '"train/loss"' in page


def test_demo_without_torch_says_what_to_install(tmp_path: Path) -> None:
    """Without torch the demo exits non-zero with the exact pip command, not a traceback."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from trainmon.cli import main\n"
        f"sys.exit(main(['demo', '-o', {str(tmp_path)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    assert 'pip install "trainmon[torch]"' in result.stderr
    assert "Traceback" not in result.stderr
