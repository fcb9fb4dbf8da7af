"""The Hugging Face Trainer driver: a real Trainer on a tiny GPT-2, read back with TensorBoard's
reader and ``read_journal`` and compared with the Trainer's own ``state.log_history``."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import PARTS, SCRIPTS, journal_steps, tensorboard_scalars, torchrun

pytest.importorskip("transformers")
sys.path.insert(0, str(SCRIPTS))
import hf_worker

from trainmon.integrations.transformers import metric_name
from trainmon.journal import read_journal
from trainmon.report.attempts import read_attempts
from trainmon.report.goodput import measure


def test_trainer_keys_get_trainmon_names() -> None:
    """The Trainer's keys map to trainmon's names; the run's average loss keeps its own name."""
    assert metric_name("loss") == "train/logged_loss"
    assert metric_name("learning_rate") == "train/lr"
    assert metric_name("grad_norm") == "train/grad_norm"
    assert metric_name("eval_loss") == "eval/loss"
    assert metric_name("eval_samples_per_second") == "eval/samples_per_second"
    assert metric_name("train_loss") == "train/train_loss"


def check_logged_like_the_trainer(out: Path, record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Every number in the Trainer's log_history is in the journal and TensorBoard, renamed,
    at the same step with the same value."""
    journal = journal_steps(out / "job")
    board = tensorboard_scalars(out / "tb" / "job")
    compared = 0
    for entry in record["log_history"]:
        step = entry["step"]
        for key, value in entry.items():
            if key == "step" or not isinstance(value, (int, float)):
                continue
            name = metric_name(key)
            assert journal[step][name] == value, (name, step)
            assert board[name][step] == pytest.approx(value, rel=1e-6), (name, step)
            compared += 1
    assert compared >= 4 * hf_worker.STEPS
    return journal


@pytest.mark.slow
def test_one_process_matches_log_history_and_times_steps(tmp_path: Path) -> None:
    """One process: the Trainer's logs arrive renamed with its values; every step has a step time
    whose parts add up to it, a data wait close to the collator's sleeps, and a throughput of
    micro batch × accumulation samples over the step time."""
    record = hf_worker.train(tmp_path)
    journal = check_logged_like_the_trainer(tmp_path, record)
    steps = range(1, hf_worker.STEPS + 1)
    assert all("perf/step_time_ms" in journal[s] for s in steps)
    times = [journal[s]["perf/step_time_ms"] for s in steps]
    # the steps fit in the time the test measured around trainer.train()
    assert sum(times) <= record["wall_s"] * 1e3
    for s in steps:
        values = journal[s]
        parts = sum(values[p] for p in PARTS)
        assert parts <= values["perf/step_time_ms"] * 1.05 + 1.0
        samples = hf_worker.MICRO * hf_worker.GAS
        assert values["perf/samples_per_sec"] == pytest.approx(
            samples / (values["perf/step_time_ms"] / 1e3), rel=1e-9
        )
        assert values["mem/rss_mb"] > 0
    # each step's data wait holds the collate sleeps the worker counted in it (plus the
    # Trainer's logging of the previous step, which runs before the next fetch)
    sleeps = {int(step): count for step, count in record["sleeps"].items()}
    sleep_ms = hf_worker.DATA_SLEEP_S * 1e3
    for s in steps:
        assert journal[s]["perf/data_ms"] >= sleeps[s] * sleep_ms * 0.95, s
    total_ms = sum(journal[s]["perf/data_ms"] for s in steps)
    assert total_ms <= sum(sleeps.values()) * sleep_ms * 2.0
    assert statistics.median(journal[s]["perf/forward_ms"] for s in steps) > 0
    # train/loss is read from the model's outputs: the same figure the Trainer logs per step
    for s in steps:
        assert journal[s]["train/loss"] == pytest.approx(journal[s]["train/logged_loss"], 1e-5)
    check_eval_and_save_spans(tmp_path, record)


def check_eval_and_save_spans(out: Path, record: dict[str, Any]) -> None:
    """The journal's ``eval`` spans (steps 10 and 20) each hold the evaluation's two collate
    calls the worker timed, and the ``checkpoint_save`` span at step 20 holds the moment the
    Trainer's checkpoint file was written (its mtime); goodput counts them as eval_s and
    checkpoint_save_s."""
    spans = [r for r in read_journal(out / "job") if r["kind"] == "span"]
    evals = [s for s in spans if s["what"] == "eval"]
    assert [s["step"] for s in evals] == [10, 20]
    for span in evals:
        inside = [t for t in record["collated_at"] if span["start_time"] <= t <= span["end_time"]]
        assert len(inside) >= 2, span  # the eval set: 8 rows in micro batches of 4
    (save,) = [s for s in spans if s["what"] == "checkpoint_save"]
    assert save["step"] == hf_worker.STEPS
    folder = out / "hf" / f"checkpoint-{hf_worker.STEPS}"
    written = max(p.stat().st_mtime for p in folder.iterdir())
    assert save["start_time"] - 0.01 <= written <= save["end_time"] + 0.01
    badput = measure(read_attempts(out / "job")).badput
    seconds = sum(s["end_time"] - s["start_time"] for s in evals)
    assert badput["eval_s"] == pytest.approx(seconds, abs=1e-6) and seconds > 0
    assert badput["checkpoint_save_s"] == pytest.approx(save["end_time"] - save["start_time"])


@pytest.mark.slow
def test_an_alert_stop_ends_training(tmp_path: Path) -> None:
    """A rule with action stop on a value the Trainer logs sets control.should_training_stop:
    training ends after the rule's step and before max_steps."""
    record = hf_worker.train(tmp_path, "stop")
    # train/epoch passes 0.5 at step 11; rules run in the background, so a few steps later
    assert 11 <= record["global_step"] < hf_worker.STEPS
    journal = journal_steps(tmp_path / "job")
    timed = [step for step, values in journal.items() if "perf/step_time_ms" in values]
    assert max(timed) == record["global_step"]


@pytest.mark.slow
def test_a_nan_stops_training_despite_the_trainers_nan_filter(tmp_path: Path) -> None:
    """Default TrainingArguments (logging_nan_inf_filter on): once the weights are NaN the
    Trainer logs a stand-in loss, but train/loss is the model's raw NaN, so a non_finite stop
    rule ends training within a few steps of it."""
    record = hf_worker.train(tmp_path, "nan")
    assert hf_worker.NAN_AT < record["global_step"] <= hf_worker.NAN_AT + 3
    journal = journal_steps(tmp_path / "job")
    first_nan = hf_worker.NAN_AT + 1
    assert math.isnan(journal[first_nan]["train/loss"])
    assert not math.isnan(journal[first_nan]["train/logged_loss"])  # the filter's stand-in
    assert all(math.isfinite(journal[s]["train/loss"]) for s in range(1, first_nan))


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path: Path) -> None:
    """Two ranks (gloo): rank 0 writes the Trainer's logs as its log_history has them, with
    cross-rank statistics and the job's throughput; both processes exit cleanly."""
    torchrun(SCRIPTS / "hf_worker.py", 2, str(tmp_path))
    record = json.loads((tmp_path / "hf.json").read_text())
    journal = check_logged_like_the_trainer(tmp_path, record)
    crossed = [v for v in journal.values() if "perf/step_time_ms/max" in v]
    assert len(crossed) == hf_worker.STEPS // 5
    for values in crossed:
        assert values["perf/samples_per_sec/argmax_rank"] in (0, 1)
        assert values["perf/job_samples_per_sec"] > values["perf/samples_per_sec/max"]
        assert not math.isnan(values["perf/straggler_ratio"])
