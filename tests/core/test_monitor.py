"""The Monitor API as a training loop uses it, read back from every writer."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon
from conftest import host_read_spy, local_config
from trainmon.core.place import ProcessPlace


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a TensorBoard folder, read with TensorBoard's own reader."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def csv_rows(path: Path) -> tuple[list[str], list[tuple[int, float]]]:
    """Header and (step, value) rows of one CSV file."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [(int(step), float(value)) for step, value in rows[1:]]


def journal_values(folder: Path) -> dict[str, list[tuple[int, Any]]]:
    """Every (step, value) per metric from the JSONL journal."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for record in trainmon.read_journal(folder):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                out.setdefault(name, []).append((record["step"], value))
    return out


def test_issue_example_reaches_every_writer(tmp_path: Path) -> None:
    """The foundation issue's loop writes the same values to TensorBoard, CSV and JSONL."""
    expected_loss = []
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(200):
            loss = 2.0 / (step + 1)
            expected_loss.append((step, loss))
            monitor.step = step
            monitor.write_events([("train/loss", loss), ("train/lr", 1e-3)])
            monitor.write_events([("eval/acc", 0.91, step)])
            monitor.log({"train/grad_norm": float(step)}, step=step)
    tb = tensorboard_scalars(tmp_path / "tb" / "job")
    assert set(tb) == {"train/loss", "train/lr", "eval/acc", "train/grad_norm"}
    assert [s for s, _ in tb["train/loss"]] == list(range(200))
    assert [v for _, v in tb["train/loss"]] == pytest.approx([v for _, v in expected_loss], 1e-6)
    header, rows = csv_rows(tmp_path / "csv" / "job" / "train_loss.csv")
    assert header == ["step", "loss"]
    assert rows == expected_loss
    assert csv_rows(tmp_path / "csv" / "job" / "eval_acc.csv")[0] == ["step", "acc"]
    journal = journal_values(tmp_path / "job")
    assert journal["train/loss"] == expected_loss
    assert journal["train/grad_norm"][-1] == (199, 199.0)


def test_value_kinds_are_resolved_in_background(tmp_path: Path) -> None:
    """ints, bools, numpy scalars and 0-d or 1-element tensors all arrive as numbers."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.write_events(
            [
                ("a/int", 7),
                ("a/bool", True),
                ("a/np_float", np.float32(0.5)),
                ("a/np_int", np.int64(2**40)),
                ("a/tensor", torch.tensor(1.25)),
                ("a/tensor_int", torch.tensor(3)),
                ("a/tensor_1elem", torch.tensor([4.5], requires_grad=True) * 2),
                ("a/tensor_bf16", torch.tensor(2.0, dtype=torch.bfloat16)),
            ]
        )
    values = {name: v[0][1] for name, v in journal_values(tmp_path / "job").items()}
    assert values == {
        "a/int": 7,
        "a/bool": 1,
        "a/np_float": 0.5,
        "a/np_int": 2**40,
        "a/tensor": 1.25,
        "a/tensor_int": 3,
        "a/tensor_1elem": 9.0,
        "a/tensor_bf16": 2.0,
    }
    assert isinstance(values["a/np_int"], int)


def test_nan_and_inf_are_recorded_not_rejected(tmp_path: Path) -> None:
    """Non-finite values reach every writer and stay distinguishable from missing values."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.write_events(
            [("train/loss", math.nan), ("x/pos", math.inf), ("x/neg", torch.tensor(-math.inf))]
        )
    journal = journal_values(tmp_path / "job")
    assert math.isnan(journal["train/loss"][0][1])
    assert journal["x/pos"][0][1] == math.inf and journal["x/neg"][0][1] == -math.inf
    assert '"train/loss":"NaN"' in (tmp_path / "job" / "metrics.jsonl").read_text()
    assert math.isnan(tensorboard_scalars(tmp_path / "tb" / "job")["train/loss"][0][1])
    assert math.isnan(csv_rows(tmp_path / "csv" / "job" / "train_loss.csv")[1][0][1])


def test_none_is_skipped_with_one_notice(tmp_path: Path, trainmon_logs: list[Any]) -> None:
    """A None value (grad norm before the first step) is skipped once-noticed, never raised."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(3):
            monitor.write_events([("train/grad_norm", None, step), ("train/loss", 1.0, step)])
        monitor.write_events([("train/grad_norm", 0.5, 3)])
    journal = journal_values(tmp_path / "job")
    assert journal["train/grad_norm"] == [(3, 0.5)]
    assert len(journal["train/loss"]) == 3
    notices = [r for r in trainmon_logs if "train/grad_norm" in r.getMessage()]
    assert len(notices) == 1


@pytest.mark.parametrize(
    ("event", "error", "fragment"),
    [
        (("train/loss", "1.0"), TypeError, "metric 'train/loss': value '1.0' is a string"),
        (("train/loss", [1.0]), TypeError, "metric 'train/loss'"),
        (("train/loss", torch.ones(3)), ValueError, "metric 'train/loss': tensor of shape (3,)"),
        (("train/loss", np.ones(2)), ValueError, "metric 'train/loss': array of shape (2,)"),
        (("train/loss", 1 + 2j), TypeError, "metric 'train/loss'"),
        (("", 1.0), ValueError, "metric name is empty"),
        ((3, 1.0), TypeError, "metric name 3"),
        ((("a",), 1.0), TypeError, "metric name ('a',)"),
        (("train/loss", 1.0, "ten"), TypeError, "metric 'train/loss': step 'ten'"),
        (("train/loss",), TypeError, "(name, value) or (name, value, step)"),
        ("train/loss", TypeError, "(name, value) or (name, value, step)"),
    ],
)
def test_bad_input_raises_at_the_call_site(
    tmp_path: Path, event: Any, error: type[Exception], fragment: str
) -> None:
    """Bad names, values, steps or shapes raise at once, naming the metric and what was expected."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.write_events([("train/ok", 1.0)])  # cache a name, so the fast path is taken first
        with pytest.raises(error) as err:
            monitor.write_events([("train/ok", 1.0), event])
        assert fragment in str(err.value)


def test_log_requires_a_mapping_and_integer_step(tmp_path: Path) -> None:
    """log() refuses a non-mapping and a non-integer step; step must be an integer."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(TypeError, match="expected a mapping"):
            monitor.log([("a", 1.0)])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="step 1.5 is not an integer"):
            monitor.log({"a": 1.0}, step=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="Monitor.step"):
            monitor.step = "3"  # type: ignore[assignment]
        monitor.step = np.int64(4)  # type: ignore[assignment]
        assert monitor.step == 4 and type(monitor.step) is int


def test_flush_makes_everything_readable_before_close(tmp_path: Path) -> None:
    """After flush() returns, every earlier event is readable in every writer."""
    config = local_config(tmp_path, trainmon={"flush_interval_s": 3600})
    monitor = trainmon.Monitor(config)
    try:
        for step in range(50):
            monitor.write_events([("train/loss", float(step), step)])
        assert monitor.flush() is True
        assert len(tensorboard_scalars(tmp_path / "tb" / "job")["train/loss"]) == 50
        assert len(csv_rows(tmp_path / "csv" / "job" / "train_loss.csv")[1]) == 50
        assert len(journal_values(tmp_path / "job")["train/loss"]) == 50
    finally:
        monitor.close()


def test_close_is_idempotent_and_flushes(tmp_path: Path) -> None:
    """close() writes everything out, can be called again, and flush() after it is a no-op."""
    monitor = trainmon.Monitor(local_config(tmp_path, trainmon={"flush_interval_s": 3600}))
    monitor.write_events([("train/loss", 1.0, 0)])
    monitor.close()
    monitor.close()
    assert monitor.flush() is False
    assert journal_values(tmp_path / "job")["train/loss"] == [(0, 1.0)]


def test_only_rank_zero_writes(tmp_path: Path) -> None:
    """A process that is not rank 0 creates no files and has no writers."""
    with trainmon.Monitor(local_config(tmp_path), place=ProcessPlace(1, 2)) as monitor:
        monitor.write_events([("train/loss", 1.0)])
        assert monitor.writers == [] and monitor.enabled is False
    assert list(tmp_path.iterdir()) == []


def test_rank_from_launcher_environment(tmp_path: Path) -> None:
    """RANK from the launcher's environment decides, once, that this process does not write."""
    script = (
        "import trainmon, json, sys\n"
        "m = trainmon.Monitor(json.loads(sys.argv[1]))\n"
        "m.write_events([('train/loss', 1.0)])\n"
        "print(m.place.rank, m.place.world_size, len(m.writers))\n"
    )
    import json

    env = {"RANK": "3", "WORLD_SIZE": "4", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(local_config(tmp_path))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["3", "4", "0"]
    assert list(tmp_path.iterdir()) == []


def test_import_does_not_pull_optional_backends() -> None:
    """``import trainmon`` imports no torch, tensorboard, wandb, prometheus_client or numpy."""
    code = (
        "import sys, trainmon\n"
        "heavy = ('torch', 'tensorboard', 'wandb', 'prometheus_client', 'numpy', 'crc32c')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_calling_thread_never_reads_tensor_values(tmp_path: Path) -> None:
    """Tensors are read on the background thread only: no .item()/.tolist()/.cpu() by the caller."""
    Counting, reads_on_caller = host_read_spy()

    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(100):
            loss = torch.tensor(float(step)).as_subclass(Counting)
            monitor.write_events([("train/loss", loss, step)])
    assert reads_on_caller == []
    assert journal_values(tmp_path / "job")["train/loss"][-1] == (99, 99.0)


def test_monitor_repr_and_writers(tmp_path: Path) -> None:
    """The monitor says which writers it has."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        assert [w.kind for w in monitor.writers] == ["tensorboard", "csv", "jsonl"]
        assert "tensorboard,csv,jsonl" in repr(monitor)


def test_pairs_and_triples_mixed_in_one_call(tmp_path: Path) -> None:
    """In one call, pairs land at the monitor's step and triples at their own step."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.step = 5
        monitor.write_events([("a", 1.0), ("b", 2.0, 7), ("c", 3.0), ("d", True)])
    journal = journal_values(tmp_path / "job")
    assert journal == {"a": [(5, 1.0)], "b": [(7, 2.0)], "c": [(5, 3.0)], "d": [(5, 1)]}
    assert type(journal["d"][0][1]) is int


@pytest.mark.parametrize(
    "bad",
    [True, 1.5, "3", torch.tensor(True), torch.tensor(2.0), torch.tensor([1, 2])],
    ids=["bool", "float", "str", "bool-tensor", "float-tensor", "two-element-tensor"],
)
def test_step_setter_refuses_what_log_refuses(tmp_path: Path, bad: Any) -> None:
    """monitor.step = x and log(..., step=x) apply one check: each refuses the same values."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(TypeError) as by_log:
            monitor.log({"a": 1.0}, step=bad)
        with pytest.raises(TypeError, match="Monitor.step") as by_setter:
            monitor.step = bad
        assert monitor.step == 0
        assert str(by_log.value).split(": ", 1)[1] == str(by_setter.value).split(": ", 1)[1]


def test_step_setter_refuses_a_sparse_tensor(tmp_path: Path) -> None:
    """A sparse one-element tensor is not a step, for the setter as for log()."""
    sparse = torch.tensor([3]).to_sparse()
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(TypeError, match="not one integer"):
            monitor.log({"a": 1.0}, step=sparse)
        with pytest.raises(TypeError, match="Monitor.step: step .* not one integer"):
            monitor.step = sparse
        monitor.step = torch.tensor(7)
        assert monitor.step == 7 and type(monitor.step) is int


def test_log_hparams_refuses_a_mapping_that_contains_itself(tmp_path: Path) -> None:
    """A self-containing hyper-parameter dict is a ValueError naming the key path, not a
    RecursionError; the same sub-mapping twice (not a cycle) is fine."""
    shared = {"lr": 0.1}
    looped: dict[str, Any] = {"model": {"width": 8}}
    looped["model"]["again"] = looped
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(ValueError, match="'model.again' contains itself"):
            monitor.log_hparams(looped)
        monitor.log_hparams({"a": shared, "b": shared})
