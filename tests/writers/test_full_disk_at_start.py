"""A disk already full when the Monitor starts pauses writing, as one full mid-run does."""

from __future__ import annotations

import csv
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainmon import Monitor, read_journal

STEPS = 40


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs filled to the last byte (skipped where mounting is not allowed)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 256k tmpfs: {mounted.stderr.strip()}")
    try:
        with open(small / "filler", "wb", buffering=0) as filler:
            for size in (4096, 1):
                while True:
                    try:
                        filler.write(b"x" * size)
                    except OSError:
                        break
        assert os.statvfs(small).f_bavail == 0
        yield small
    finally:
        if subprocess.run(["umount", str(small)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(small)], capture_output=True)


@pytest.mark.slow
def test_every_format_holds_every_step_once_after_space_returns(full_disk: Path) -> None:
    """Started on a full disk, TensorBoard, the journal and CSV stay enabled and, once space is
    freed, each holds every step exactly once (read back with each consumer's reader)."""
    out = full_disk / "out"
    section = {"enabled": True, "output_path": str(out), "job_name": "run"}
    monitor = Monitor(
        {
            "console": {"enabled": False},
            "tensorboard": section,
            "jsonl": section,
            "csv_monitor": section,
            "trainmon": {"flush_interval_s": 0.05},
        }
    )
    assert sorted(w.kind for w in monitor.writers) == ["csv", "jsonl", "tensorboard"]
    for step in range(STEPS // 2):
        monitor.log({"loss": float(step)}, step=step)
    monitor.flush(timeout=5)
    (full_disk / "filler").unlink()
    for step in range(STEPS // 2, STEPS):
        monitor.log({"loss": float(step)}, step=step)
    time.sleep(0.5)
    monitor.close()

    expected = list(range(STEPS))
    run = out / "run"
    journal = [
        r["step"] for r in read_journal(run) if r["kind"] == "scalars" and "loss" in r["values"]
    ]
    assert journal == expected
    with open(run / "loss.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "loss"] and [int(r[0]) for r in rows[1:]] == expected
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == expected
    assert monitor.undelivered == {}
