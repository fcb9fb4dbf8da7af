"""A run's duration is the wall time of its steps, however fast they are.

Each step's time is stamped at the call that logs it (``write_events``, ``log``, the step
instrument's ``step_end``), never when the background thread batches or flushes it: 100 steps
of about 0.3 ms each, logged in every way a run logs, read back by ``trainmon summary`` from the
journal and from the TensorBoard folder, span what the loop measured around its first and last
logging calls (once reported as "100 steps in 4 ms" for a loop that took 33.9 ms).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.cli import main

STEPS = 100
SPIN_S = 0.0003  # a step's own work: a busy wait, as time.sleep is too coarse at this scale


def spin() -> None:
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        pass


def config(out: Path) -> dict[str, Any]:
    return {
        "steps_per_print": 10,
        "console": {"enabled": False},
        # a sample taken between the last step and close would rightly lengthen the run
        "system_metrics": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
    }


def timed_steps(log_step: Callable[[int], None]) -> tuple[float, float, float]:
    """Run the steps; (loop seconds, shortest and longest possible span of the logged times):
    step 1's time lies within its logging call, and so does the last step's."""
    bounds = []
    start = time.time()
    for step in range(1, STEPS + 1):
        before = time.time()
        log_step(step)
        bounds.append((before, time.time()))
        spin()
    loop = time.time() - start
    (first_before, first_after), (last_before, last_after) = bounds[0], bounds[-1]
    return loop, last_before - first_after, last_after - first_before


def summary_duration(folder: Path, capsys: pytest.CaptureFixture[str]) -> float:
    capsys.readouterr()
    assert main(["summary", str(folder), "--json"]) == 0
    got: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert got["steps"] == STEPS
    duration: float = got["duration_s"]
    return duration


def check(out: Path, spans: tuple[float, float, float], capsys: pytest.CaptureFixture[str]) -> None:
    loop, shortest, longest = spans
    assert loop >= STEPS * SPIN_S
    for folder in (out / "job", out / "tb" / "job"):
        duration = summary_duration(folder, capsys)
        # the journal and the event files keep times as doubles: microseconds are exact
        assert shortest - 1e-6 <= duration <= longest + 1e-6, (folder, duration, spans)
        assert duration >= loop * 0.5, (folder, duration, loop)  # not a fraction of it


@pytest.mark.parametrize("way", ["log", "pairs", "triples", "emit_checked"])
def test_monitor_steps_span_the_loops_wall_time(
    tmp_path: Path, way: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``log(step=)``, ``Monitor.step`` + ``write_events`` pairs, ``(name, value, step)``
    triples, and ``emit_checked`` (trainmon's own producers) give the loop's span."""
    with trainmon.Monitor(config(tmp_path)) as monitor:

        def log_step(step: int) -> None:
            loss = 1.0 / step
            if way == "log":
                monitor.log({"train/loss": loss, "perf/step_time_ms": 0.3}, step=step)
            elif way == "triples":
                monitor.write_events((("train/loss", loss, step),))
            else:
                monitor.step = step
                if way == "pairs":
                    monitor.write_events((("train/loss", loss), ("perf/step_time_ms", 0.3)))
                else:
                    monitor.emit_checked((("train/loss", loss),), resolve=False)

        spans = timed_steps(log_step)
    check(tmp_path, spans, capsys)


def test_engine_steps_span_the_loops_wall_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trainmon.initialize's engine (the step instrument, a tensor loss resolved in the
    background) gives the span of its ``step()`` calls."""
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(2, 1)
    cfg = {**config(tmp_path), "train_micro_batch_size_per_gpu": 4}
    engine, _, _, _ = trainmon.initialize(
        model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01), config=cfg
    )
    inputs = torch.randn(4, 2)
    with engine:

        def log_step(step: int) -> None:
            engine.backward(engine(inputs).pow(2).mean())
            engine.step()  # logs the step: its time is stamped here

        spans = timed_steps(log_step)
    check(tmp_path, spans, capsys)
