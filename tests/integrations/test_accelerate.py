"""The Accelerate tracker: a real Accelerator run read back with TensorBoard's reader and
``read_journal`` and compared with what the loop gave ``accelerator.log``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import SCRIPTS, journal_steps, recorded_hparams, tensorboard_scalars, torchrun

pytest.importorskip("accelerate")
sys.path.insert(0, str(SCRIPTS))
import accelerate_worker


def check_logged(out: Path, record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Every number given to accelerator.log is in the journal and TensorBoard at its step;
    text values are left out; the hyper-parameters are recorded; the run was closed by
    end_training (the journal is complete)."""
    journal = journal_steps(out / "job")
    board = tensorboard_scalars(out / "tb" / "job")
    for entry in record["logged"]:
        step = entry["step"]
        for name in ("train/loss", "train/lr"):
            assert journal[step][name] == entry[name]
            assert board[name][step] == pytest.approx(entry[name], rel=1e-6)
        assert "note" not in journal[step]
    assert record["init_configuration"] == {"lr": 0.05, "batch": accelerate_worker.BATCH}
    # init_trackers(config=...) reaches the journal and TensorBoard's HParams dashboard
    from_journal, from_board = recorded_hparams(out / "job", out / "tb" / "job")
    assert from_journal == {"lr": 0.05, "batch": accelerate_worker.BATCH}
    assert from_board == {"lr": 0.05, "batch": float(accelerate_worker.BATCH)}
    return journal


@pytest.mark.slow
def test_one_process(tmp_path: Path) -> None:
    """One process: logged values arrive at their steps; from the second step on each step has
    a step time of at least the loop's sleep, batch/step-time throughput and memory."""
    record = accelerate_worker.train(tmp_path)
    journal = check_logged(tmp_path, record)
    steps = range(2, accelerate_worker.STEPS + 1)
    assert "perf/step_time_ms" not in journal[1]
    sleep_ms = accelerate_worker.STEP_SLEEP_S * 1e3
    for s in steps:
        values = journal[s]
        assert values["perf/step_time_ms"] >= sleep_ms * 0.95
        assert values["perf/samples_per_sec"] == pytest.approx(
            accelerate_worker.BATCH / (values["perf/step_time_ms"] / 1e3), rel=1e-9
        )
        assert values["mem/rss_mb"] > 0
    assert sum(journal[s]["perf/step_time_ms"] for s in steps) <= record["wall_s"] * 1e3


@pytest.mark.slow
def test_a_nan_loss_stops_at_the_step_that_logged_it(tmp_path: Path) -> None:
    """Accelerate passes the loop's numbers through as they are: the NaN loss (a float from
    loss.item()) is judged at the call, so tracker.stop_reason is set at that very step."""
    record = accelerate_worker.train(tmp_path, nan=True)
    steps = [entry["step"] for entry in record["logged"]]
    first_nan = accelerate_worker.NAN_AT + 1
    assert steps[-1] == first_nan
    assert math.isnan(record["logged"][-1]["train/loss"])
    journal = journal_steps(tmp_path / "job")
    assert math.isnan(journal[first_nan]["train/loss"])


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path: Path) -> None:
    """Two ranks: the main process's tracker writes what it logged; end_training closes it
    before Accelerate destroys the process group, and both processes exit cleanly."""
    torchrun(SCRIPTS / "accelerate_worker.py", 2, str(tmp_path))
    record = json.loads((tmp_path / "accelerate.json").read_text())
    check_logged(tmp_path, record)
    assert len(list((tmp_path / "job").glob("*.jsonl"))) == 1
