"""``trainmon.attach`` beside a real DeepSpeed engine (CPU accelerator, gloo), read back.

A worker process (``scripts/deepspeed_worker.py``) trains a tiny model under each ZeRO stage
with DeepSpeed's TensorBoard, CSV and ``wall_clock_breakdown`` on and records what it measured
itself; the tests read every output with its consumer's reader and compare.
"""

from __future__ import annotations

import csv
import json
import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import trainmon
from integrations.helpers import deepspeed_env

SCRIPTS = Path(__file__).parents[1] / "scripts"
WORKER = SCRIPTS / "deepspeed_worker.py"
STAGES = ("0", "00", "1", "2", "3")  # "00": ZeRO 0 without gradient clipping
STEPS = 4
#: attach sees no loader: the gap from step() to the next forward is between_steps, not data
BREAKDOWN_PARTS = ("forward", "backward_inner", "optimizer", "comm", "between_steps")

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = deepspeed_env()
    result = subprocess.run(command, capture_output=True, text=True, timeout=420, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Every ZeRO stage, one process; returns the output folder and the worker's stdout."""
    out = tmp_path_factory.mktemp("ds1")
    stages = ",".join(str(s) for s in STAGES)
    result = _run([sys.executable, str(WORKER), str(out), stages, str(STEPS), "alerts"])
    return out, result.stdout + result.stderr


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ZeRO 0 and 2 on two gloo ranks under torchrun."""
    out = tmp_path_factory.mktemp("ds2")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    command += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}"]
    _run([*command, str(WORKER), str(out), "0,2", str(STEPS)])
    return out


def truth(out: Path, stage: str, rank: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / f"truth-rank{rank}.json").read_text())[str(stage)]
    return data


def scalars(folder: Path) -> dict[int, dict[str, float]]:
    """The journal's values by step (merged, as readers do)."""
    steps: dict[int, dict[str, float]] = {}
    for record in trainmon.read_journal(folder):
        if record["kind"] == "scalars":
            steps.setdefault(record["step"], {}).update(record["values"])
    return steps


def tensorboard(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def tb_series(acc: Any, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


@pytest.mark.parametrize("stage", STAGES)
def test_trainmon_metrics_match_what_the_loop_measured(
    one_process: tuple[Path, str], stage: str
) -> None:
    """train/loss is the mean of the step's micro-batch losses, train/lr and train/grad_norm
    are DeepSpeed's (at ZeRO 0 the norm DeepSpeed leaves None is computed by trainmon), at
    training steps 1..N; the breakdown parts add up to no more than the step."""
    out, _ = one_process
    seen = truth(out, stage)
    steps = scalars(out / f"jsonl{stage}")
    assert sorted(steps) == seen["steps"][:STEPS] == list(range(1, STEPS + 1))
    for index, step in enumerate(seen["steps"][:STEPS]):
        values = steps[step]
        losses = seen["losses"][index]
        assert values["train/loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)
        assert values["train/lr"] == pytest.approx(seen["lr"][index])
        assert values["train/grad_norm"] == pytest.approx(seen["norm"][index], rel=1e-5)
        step_ms = values["perf/step_time_ms"]
        parts = [values[f"perf/{part}_ms"] for part in BREAKDOWN_PARTS]
        assert all(part >= 0.0 for part in parts), values
        assert sum(parts) <= step_ms * 1.05 + 1.0, values
        # this rank's 2 micro-batches of 2 samples over the step time
        assert values["perf/samples_per_sec"] == pytest.approx(4 / (step_ms / 1e3), rel=1e-6)
        assert values["mem/rss_mb"] > 0
        assert "perf/data_ms" not in values  # no loader seen: no wait is claimed as data's
        if stage.startswith("0"):  # DeepSpeed's gradient all-reduce is marked as the comm phase
            assert values["perf/backward_allreduce_ms"] >= 0.0


@pytest.mark.parametrize("stage", STAGES)
def test_deepspeed_events_keep_deepspeeds_layouts(
    one_process: tuple[Path, str], stage: str
) -> None:
    """DeepSpeed's Train/Samples events (and the user's own via engine.monitor) reach its
    TensorBoard and CSV folders at global_samples, while the journal and the windows keep
    training steps only."""
    out, _ = one_process
    seen = truth(out, stage)
    samples = seen["samples"][:STEPS]
    acc = tensorboard(out / f"tb{stage}")
    lr = tb_series(acc, "Train/Samples/lr")
    assert [s for s, _ in lr] == samples
    assert [v for _, v in lr] == pytest.approx(seen["lr"][:STEPS])
    for part in ("forward", "backward", "backward_inner", "backward_allreduce", "step"):
        series = tb_series(acc, f"Train/Samples/elapsed_time_ms_{part}")
        assert [s for s, _ in series] == samples
        assert all(v >= 0.0 for _, v in series)
    assert tb_series(acc, "Eval/loss") == [(seen["eval_samples"][0], 0.25)]
    assert [s for s, _ in tb_series(acc, "train/loss")] == list(range(1, STEPS + 1))
    rows = csv_rows(out / f"csv{stage}" / "Train_Samples_lr.csv")
    assert rows[0] == ["step", "lr"]
    assert [int(r[0]) for r in rows[1:]] == samples
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(seen["lr"][:STEPS])
    loss_rows = csv_rows(out / f"csv{stage}" / "train_loss.csv")
    assert [int(r[0]) for r in loss_rows[1:]] == list(range(1, STEPS + 1))
    records = list(trainmon.read_journal(out / f"jsonl{stage}"))
    names = {n for r in records if r["kind"] == "scalars" for n in r["values"]}
    assert not any(n.startswith(("Train/Samples", "Eval/")) for n in names)
    windows = [r for r in records if r["kind"] == "window"]
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(1, 2), (3, 4)]


def test_deepspeed_breakdown_is_taken_over(one_process: tuple[Path, str]) -> None:
    """With DeepSpeed's wall_clock_breakdown on, DeepSpeed's own per-step timer lines (engine
    and ZeRO optimizer) are gone; trainmon's console line shows the breakdown instead."""
    _, output = one_process
    for line in output.splitlines():
        assert "fwd_microstep" not in line and "time (ms) | fwd" not in line, line
        assert "optimizer_allgather" not in line and "optimizer_gradients" not in line, line
    assert "step 4 |" in output and "(fwd " in output


def test_checkpoint_carries_trainmon_state(one_process: tuple[Path, str]) -> None:
    """DeepSpeed's save_checkpoint writes trainmon's state into the tag folder; after
    load_checkpoint in a new engine, trainmon's step continues from the checkpoint. Both are
    timed into the journal as spans inside the calls' own wall time (most of it)."""
    out, _ = one_process
    tag = out / "ckpt" / "global_step4"
    state = json.loads((tag / "trainmon_state_rank0.json").read_text())
    assert state["step"] == STEPS
    assert (out / "ckpt" / "latest").read_text().strip() == "global_step4"
    seen = truth(out, "0")
    assert seen["resumed_at"] == [STEPS]
    records = list(trainmon.read_journal(out / "resumed0"))
    assert [r["step"] for r in records if r["kind"] == "resume"] == [STEPS + 1]
    steps = scalars(out / "resumed0")
    assert sorted(steps) == [STEPS + 1, STEPS + 2]
    losses = seen["losses"][STEPS]
    assert steps[STEPS + 1]["train/loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)
    for folder, what, wall in (
        ("jsonl0", "checkpoint_save", seen["save_wall"]),
        ("resumed0", "checkpoint_load", seen["load_wall"]),
    ):
        spans = [r for r in trainmon.read_journal(out / folder) if r["kind"] == "span"]
        (span,) = [r for r in spans if r["what"] == what]
        assert wall[0] <= span["start_time"] <= span["end_time"] <= wall[1]
        assert span["end_time"] - span["start_time"] >= 0.5 * (wall[1] - wall[0])


@pytest.mark.parametrize("stage", ["0", "2"])
def test_two_ranks_loss_is_the_data_parallel_mean(two_ranks: Path, stage: str) -> None:
    """Under torchrun with two ranks, train/loss is the mean over micro-batches and ranks,
    windows carry cross-rank statistics (the gather did not desynchronise), the breakdown's
    nested part (backward_allreduce) stays within comm, and DeepSpeed's events are written
    once, by rank 0."""
    out = two_ranks
    rank0, rank1 = truth(out, stage, 0), truth(out, stage, 1)
    steps = scalars(out / f"jsonl{stage}")
    assert sorted(steps) == list(range(1, STEPS + 1))
    for index in range(STEPS):
        means = [sum(t["losses"][index]) / 2 for t in (rank0, rank1)]
        assert steps[index + 1]["train/loss"] == pytest.approx(sum(means) / 2, rel=1e-5)
        assert steps[index + 1]["train/grad_norm"] == pytest.approx(rank0["norm"][index], 1e-5)
        assert not math.isclose(means[0], means[1])
        # parts within their whole: the reduction DeepSpeed runs at the boundary (a part of
        # communication) never exceeds all communication; the disjoint parts fit the step
        values = steps[index + 1]
        assert values["perf/backward_allreduce_ms"] <= values["perf/comm_ms"], values
        parts = [values[f"perf/{part}_ms"] for part in BREAKDOWN_PARTS]
        assert sum(parts) <= values["perf/step_time_ms"] * 1.05 + 1.0, values
    assert steps[2]["perf/step_time_ms/max"] >= steps[2]["perf/step_time_ms/min"]
    assert steps[STEPS]["perf/job_samples_per_sec"] > 0
    assert sorted(p.name for p in out.glob(f"jsonl{stage}/**/metrics.jsonl")) == ["metrics.jsonl"]
    rows = csv_rows(out / f"csv{stage}" / "Train_Samples_lr.csv")
    assert [int(r[0]) for r in rows[1:]] == rank0["samples"][:STEPS]
    acc = tensorboard(out / f"tb{stage}")
    assert tb_series(acc, "Eval/loss") == [(rank0["eval_samples"][0], 0.25)]


def test_a_nan_loss_stops_training_within_a_few_steps(one_process: tuple[Path, str]) -> None:
    """Under attach, train/loss is the loss each backward got (DeepSpeed hides nothing in fp32):
    once the weights are NaN the journal shows NaN and a non_finite stop rule ends training
    within 3 steps."""
    out, _ = one_process
    stopped_at = truth(out, "nan")["stopped_at"][0]
    first_nan = 6  # deepspeed_worker.NAN_AT + 1
    assert stopped_at is not None and first_nan <= stopped_at <= first_nan + 3
    steps = scalars(out / "nan-jsonl")
    assert math.isnan(steps[first_nan]["train/loss"])
    assert all(math.isfinite(steps[s]["train/loss"]) for s in range(1, first_nan))


def test_stop_rule_stops_training_and_refuses_a_checkpoint(one_process: tuple[Path, str]) -> None:
    """An "action": "stop" rule raises TrainingStopped from engine.step() a few steps after the
    value; callbacks saw every step until then; save_checkpoint afterwards saves nothing."""
    out, _ = one_process
    seen = truth(out, "alerts")
    stopped_at = seen["stopped_at"][0]
    assert stopped_at is not None and 1 <= stopped_at < 100
    assert seen["callback_steps"] == list(range(1, stopped_at + 1))
    assert seen["refused"] == [True]
    assert not (out / "refused").exists()
