"""The Lightning driver: a real Trainer fitting a small MLP, read back with TensorBoard's reader
and ``read_journal`` and compared with Lightning's own CSVLogger and ``callback_metrics``."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import math
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import PARTS, SCRIPTS, journal_steps, recorded_hparams, tensorboard_scalars

pytest.importorskip("trainmon.integrations.lightning")
sys.path.insert(0, str(SCRIPTS))
import lightning_worker

from trainmon.journal import read_journal


def check_logged_like_lightning(out: Path, record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """What ``self.log`` logged (Lightning's CSVLogger rows) is in the journal and TensorBoard
    with the same values, at the trainer's global step (the CSV's step + 1); ``train/lr`` is
    the rate LearningRateMonitor saw for each step; the hyper-parameters reach the journal and
    TensorBoard's HParams; the last values are ``trainer.callback_metrics``."""
    journal = journal_steps(out / "job")
    board = tensorboard_scalars(out / "tb" / "job")
    rows = list(csv.DictReader((out / "csv/lightning/version_0/metrics.csv").open()))
    compared = 0
    rates = 0
    for row in rows:
        step = int(row["step"]) + 1
        if row.get("lr-SGD"):  # LearningRateMonitor: the rate of the step about to run
            assert journal[step]["train/lr"] == pytest.approx(float(row["lr-SGD"]), rel=1e-12)
            assert board["train/lr"][step] == pytest.approx(float(row["lr-SGD"]), rel=1e-6)
            rates += 1
        for name in ("train_loss", "val_loss"):
            if row.get(name):
                assert journal[step][name] == float(row[name]), (name, step)
                assert board[name][step] == pytest.approx(float(row[name]), rel=1e-6)
                compared += 1
    assert compared >= record["global_step"]
    assert rates == record["global_step"]  # train/lr at every step, the scheduler's decay
    assert len({journal[s]["train/lr"] for s in range(1, record["global_step"] + 1)}) > 1
    from_journal, from_board = recorded_hparams(out / "job", out / "tb" / "job")
    assert from_journal == {"hidden": 32, "lr": 0.05}
    assert from_board == {"hidden": 32.0, "lr": 0.05}
    last = record["global_step"]
    for name, value in record["callback_metrics"].items():
        if name.startswith("lr-"):  # LearningRateMonitor logs at a batch's start: checked above
            continue
        assert journal[last][name] == pytest.approx(value, rel=1e-6), name
    return journal


@pytest.mark.slow
def test_one_process_matches_lightning_and_times_steps(tmp_path: Path) -> None:
    """One process: self.log values arrive at global_step as Lightning recorded them; each
    step has a step time split into disjoint parts, a data wait of at least the collate's
    sleep, the batch's samples over the step time, the loss and a gradient norm."""
    record = lightning_worker.fit(tmp_path)
    assert record["hyperparams"] == {"hidden": 32, "lr": 0.05}
    journal = check_logged_like_lightning(tmp_path, record)
    steps = range(1, lightning_worker.STEPS + 1)
    times = [journal[s]["perf/step_time_ms"] for s in steps]
    assert sum(times) <= record["wall_s"] * 1e3
    sleep_ms = lightning_worker.DATA_SLEEP_S * 1e3
    for s in steps:
        values = journal[s]
        assert sum(values[p] for p in PARTS) <= values["perf/step_time_ms"] * 1.05 + 1.0
        assert values["perf/data_ms"] >= sleep_ms * 0.95
        assert values["perf/samples_per_sec"] == pytest.approx(
            lightning_worker.BATCH / (values["perf/step_time_ms"] / 1e3), rel=1e-9
        )
        assert values["train/loss"] == pytest.approx(values["train_loss"], rel=1e-6)
        assert values["train/grad_norm"] > 0
    assert statistics.median(journal[s]["perf/data_ms"] for s in steps) < sleep_ms * 2.5
    # validation is timed into the journal as eval spans holding every validation batch
    spans = [r for r in read_journal(tmp_path / "job") if r["kind"] == "span"]
    assert {r["what"] for r in spans} == {"eval"}
    assert {10, 20} <= {r["step"] for r in spans}
    for t in record["validated_at"]:
        assert any(r["start_time"] <= t <= r["end_time"] for r in spans), t


@pytest.mark.slow
def test_grad_norm_every_logs_the_norm_at_multiples_only(tmp_path: Path) -> None:
    """``trainmon.grad_norm_every: 4``: train/grad_norm at steps 4, 8, ... and no other."""
    lightning_worker.fit(tmp_path, mode="grad_norm_every")
    journal = journal_steps(tmp_path / "job")
    steps = range(1, lightning_worker.STEPS + 1)
    assert all("train/loss" in journal[s] for s in steps)
    assert [s for s in steps if "train/grad_norm" in journal[s]] == [4, 8, 12, 16, 20]


@pytest.mark.slow
def test_an_alert_stop_sets_should_stop(tmp_path: Path) -> None:
    """A stop rule on a value the module logs sets trainer.should_stop: fitting ends at or after
    the step whose value fired it, before max_steps."""
    record = lightning_worker.fit(tmp_path, mode="stop")
    journal = journal_steps(tmp_path / "job")
    fired = min(s for s, v in journal.items() if v.get("train_loss", 9.0) < 2.0)
    assert fired <= record["global_step"] < lightning_worker.STEPS


@pytest.mark.slow
def test_a_nan_loss_stops_the_fit_within_a_few_steps(tmp_path: Path) -> None:
    """Lightning hands the callback the raw loss (no NaN filter): once the weights are NaN,
    train/loss is NaN in the journal and a non_finite stop rule ends fitting within 3 steps."""
    record = lightning_worker.fit(tmp_path, mode="nan")
    first_nan = lightning_worker.NAN_AT + 1
    assert first_nan <= record["global_step"] <= first_nan + 3
    journal = journal_steps(tmp_path / "job")
    assert math.isnan(journal[first_nan]["train/loss"])
    assert all(math.isfinite(journal[s]["train/loss"]) for s in range(1, first_nan))


@pytest.mark.slow
def test_a_failing_fit_still_closes_and_keeps_its_steps(tmp_path: Path) -> None:
    """When training_step raises, Lightning calls finalize("failed"): the monitor is closed
    (its background thread is gone) and the steps done before the error are in the journal."""
    with pytest.raises(RuntimeError, match="on purpose"):
        lightning_worker.fit(tmp_path, mode="fail")
    assert not [t for t in threading.enumerate() if t.name == "trainmon-pipeline"]
    journal = journal_steps(tmp_path / "job")
    timed = sorted(s for s, v in journal.items() if "perf/step_time_ms" in v)
    assert timed == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_two_processes_with_lightning_ddp(tmp_path: Path) -> None:
    """Lightning's own ddp on the CPU (it re-runs the script for rank 1 without RANK): rank 0
    writes what Lightning recorded, with statistics gathered from both ranks."""
    script = SCRIPTS / "lightning_worker.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "2"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "terminate called" not in output and "cross-rank statistics stopped" not in output
    record = json.loads((tmp_path / "lightning.json").read_text())
    journal = check_logged_like_lightning(tmp_path, record)
    crossed = [v for v in journal.values() if "perf/step_time_ms/max" in v]
    assert len(crossed) == lightning_worker.STEPS // 5
    for values in crossed:
        assert values["perf/job_samples_per_sec"] > values["perf/samples_per_sec/max"]
        assert values["mem/rss_mb/argmax_rank"] in (0, 1)


@pytest.mark.parametrize(
    ("lightning_status", "status"), [("success", "success"), ("failed", "failed")]
)
def test_finalize_passes_lightnings_status_to_the_writers(
    lightning_status: str, status: str
) -> None:
    """Lightning's ``finalize("failed")`` ends the run as failed in every writer (what MLflow
    and W&B record), read back from trainmon.testing.MemoryWriter."""
    from trainmon.integrations.lightning import TrainmonLogger
    from trainmon.testing import MemoryWriter
    from trainmon.writers import register_writer, unregister_writer

    built: list[MemoryWriter] = []
    register_writer("test-lightning-memory", lambda: built.append(MemoryWriter()) or built[-1])
    try:
        config = {"console": {"enabled": False}, "writers": [{"class": "test-lightning-memory"}]}
        logger = TrainmonLogger(config)
        logger.log_metrics({"train/loss": 0.5}, step=1)
        logger.finalize(lightning_status)
    finally:
        unregister_writer("test-lightning-memory")
    assert [(w.status, w.values("train/loss")) for w in built] == [(status, [(1, 0.5)])]


@dataclasses.dataclass
class _Pair:
    x: Any
    y: Any


def _batches() -> list[Any]:
    """Batch shapes for the batch-size fast path: the ones it takes and the ones it leaves to
    Lightning (nested, non-tensor, ambiguous, empty, subclasses)."""
    import collections

    import torch

    a, b, one = torch.zeros(8, 4), torch.zeros(8), torch.zeros(1, 3)
    other, scalar = torch.zeros(5, 2), torch.tensor(3.0)
    named = collections.namedtuple("named", "x y")
    return [
        a,
        b,
        scalar,
        torch.zeros(0, 4),
        torch.nn.Parameter(torch.zeros(6, 2)),
        (a, b),
        [a, b, a],
        {"x": a, "y": b},
        (a,),
        (one, scalar),  # a 0-d tensor counts 1: agrees with a first dimension of 1
        (scalar, scalar),
        (a, other),  # ambiguous: Lightning warns and keeps the first
        [other, a, a],
        {"x": a, "y": other},
        (scalar, a),
        (a, scalar),
        (a, (b, a)),
        (a, [other]),
        {"x": {"y": a}, "z": b},
        (a, "text"),
        (a, None),
        ("text", a),
        (a, 3),
        [1, 2, 3],
        (),
        [],
        {},
        "text",
        None,
        3,
        named(a, b),
        collections.OrderedDict(x=a, y=other),
        _Pair(a, b),
        _Pair(a, other),
    ]


@pytest.mark.parametrize("index", range(len(_batches())))
def test_batch_size_fast_path_equals_lightnings_extract_batch_size(index: int) -> None:
    """``batch_size_of`` returns what Lightning's ``extract_batch_size`` returns, raises what it
    raises and warns what it warns, for every batch shape (its warning cache cleared before
    each call, since Lightning warns each message once)."""
    import warnings

    from trainmon.integrations import lightning as driver

    data = importlib.import_module(driver.PACKAGE + ".utilities.data")
    outcomes = []
    for function in (data.extract_batch_size, driver.batch_size_of):
        batch = _batches()[index]
        data.warning_cache.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                size = function(batch)
                got: Any = ("value", size, type(size))
            except Exception as error:  # the same error is the point
                got = ("error", type(error), str(error))
        outcomes.append((got, [(w.category, str(w.message)) for w in caught]))
    assert outcomes[0] == outcomes[1]


def test_log_metrics_queues_what_monitor_log_queues() -> None:
    """The logger's direct path writes what ``Monitor.log(values, step)`` writes: strings left
    out, tensors captured, a step that is not a plain int (numpy's) checked and converted, and
    no step (no trainer bound) at the monitor's step; bad steps raise Monitor.log's errors."""
    import numpy as np
    import torch

    from trainmon.integrations.lightning import TrainmonLogger
    from trainmon.testing import MemoryWriter
    from trainmon.writers import register_writer, unregister_writer

    built: list[MemoryWriter] = []
    register_writer("test-lightning-log", lambda: built.append(MemoryWriter()) or built[-1])
    try:
        config = {"console": {"enabled": False}, "writers": [{"class": "test-lightning-log"}]}
        logger = TrainmonLogger(config)
        value = torch.tensor(2.0)
        logger.log_metrics({"a": 0.5, "name": "text", "b": value}, step=3)
        value.fill_(9.0)  # captured at the call
        logger.log_metrics({"a": 1.5}, step=np.int64(4))
        logger.experiment.step = 7
        logger.log_metrics({"a": 2.5, "c": b"bytes"}, step=None)
        logger.log_metrics({"only": "text"}, step=8)
        with pytest.raises(TypeError, match="not an integer"):
            logger.log_metrics({"a": 1.0}, step=2.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"log\(step=\.\.\.\): step .* outside the 64-bit"):
            logger.log_metrics({"a": 1.0}, step=2**63)
        logger.finalize("success")
    finally:
        unregister_writer("test-lightning-log")
    (writer,) = built
    assert writer.values("a") == [(3, 0.5), (4, 1.5), (7, 2.5)]
    assert writer.values("b") == [(3, 2.0)]
    assert writer.values("name") == writer.values("c") == writer.values("only") == []
