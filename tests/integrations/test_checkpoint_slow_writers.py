"""A checkpoint waits for the alert rules, never for slow or hung writers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from trainmon import Monitor, TrainingStopped
from trainmon.core.events import StepScalars
from trainmon.integrations.checkpoint import monitor_state_path, save_monitor_state
from trainmon.testing import SlowWriter

NAMES = [f"m{i}" for i in range(20)]


class HangingFlushWriter(SlowWriter):
    """A custom writer whose flush blocks until released."""

    def __init__(self) -> None:
        super().__init__(location="hanging-flush")
        self.release = threading.Event()

    def write(self, records: Sequence[StepScalars]) -> None:
        pass

    def flush(self) -> None:
        self.release.wait()


def test_checkpoint_with_a_backlog_of_slow_writers_takes_under_a_second(tmp_path: Path) -> None:
    """5,000 steps of 20 scalars behind two 50 ms writers: barrier + state save in under 1 s,
    and the saved state holds the step."""
    monitor = Monitor(
        {"console": {"enabled": False}, "trainmon": {"close_timeout_s": 1.0}},
        writers=[SlowWriter(), SlowWriter()],
    )
    try:
        for step in range(5000):
            monitor.write_events([(name, float(step), step) for name in NAMES])
        monitor.step = 4999
        started = time.monotonic()
        monitor.checkpoint_barrier()
        path = save_monitor_state(monitor, tmp_path / "ckpt")
        elapsed = time.monotonic() - started
    finally:
        monitor.close()
    assert elapsed < 1.0, elapsed
    state = json.loads(path.read_text())
    assert path == monitor_state_path(tmp_path / "ckpt", 0)
    assert state["step"] == 4999


def test_a_hanging_flush_does_not_hold_the_checkpoint(tmp_path: Path) -> None:
    """A writer whose flush never returns costs the checkpoint nothing."""
    hanging = HangingFlushWriter()
    monitor = Monitor({"console": {"enabled": False}}, writers=[hanging])
    try:
        monitor.log({"loss": 1.0}, step=1)
        started = time.monotonic()
        monitor.checkpoint_barrier()
        save_monitor_state(monitor, tmp_path / "ckpt")
        assert time.monotonic() - started < 1.0
    finally:
        hanging.release.set()
        monitor.close()


def test_the_barrier_still_waits_for_a_stop_rule(tmp_path: Path) -> None:
    """A stop rule that fires on a value logged just before the save still refuses it, with
    slow writers behind."""
    monitor = Monitor(
        {
            "console": {"enabled": False},
            "alerts": {
                "rules": [
                    {
                        "name": "huge",
                        "metric": "loss",
                        "op": ">",
                        "threshold": 5.0,
                        "action": "stop",
                    }
                ],
                "sinks": [],
            },
        },
        writers=[SlowWriter()],
    )
    try:
        for step in range(200):
            monitor.log({"loss": 1.0}, step=step)
        monitor.log({"loss": 10.0}, step=200)
        with pytest.raises(TrainingStopped):
            monitor.checkpoint_barrier()
    finally:
        monitor.close()
