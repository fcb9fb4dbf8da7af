"""The seed's ``engine.monitor.write_events`` calls after ``trainmon.attach`` on a real engine."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util

from integrations.helpers import SCRIPTS, deepspeed_env, tensorboard_scalars

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One run of the seed-events script; its output folder and its stdout + stderr."""
    out = tmp_path_factory.mktemp("seed-events")
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "deepspeed_seed_events.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=deepspeed_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return out, output


def test_name_value_pairs_are_written_at_the_engine_step(run: tuple[Path, str]) -> None:
    """The seed's (name, value) pairs are accepted and land at global_steps 1..4."""
    out, _ = run
    tags = tensorboard_scalars(out / "tb")
    assert tags["user/pair_metric"] == {1: 7.0, 2: 7.0, 3: 7.0, 4: 7.0}
    assert sorted(tags["train/lr"]) == [1, 2, 3, 4]


def test_a_colliding_name_keeps_one_x_axis_per_tag(run: tuple[Path, str]) -> None:
    """train/loss stays on global_steps; the user's samples-axis copy moves, with one warning."""
    out, output = run
    tags = tensorboard_scalars(out / "tb")
    assert sorted(tags["train/loss"]) == [1, 2, 3, 4]
    assert sorted(tags["train/loss@global_samples"]) == [4, 8, 12, 16]
    assert sorted(tags["user/by_samples"]) == [4, 8, 12, 16]
    assert output.count("'train/loss@global_samples'") == 1
    assert "global_steps" in output and "global_samples" in output


def test_deepspeeds_own_events_follow_deepspeeds_config(run: tuple[Path, str]) -> None:
    """DeepSpeed's Train/Samples events are written when DeepSpeed's config turns its monitor
    on; with TensorBoard given to attach only, the folder holds trainmon's tags and the user's
    own engine.monitor events, and engine.monitor.enabled reads False as in DeepSpeed."""
    out, output = run
    assert sorted(tensorboard_scalars(out / "tb")["Train/Samples/lr"]) == [4, 8, 12, 16]
    assert "attach-only engine.monitor.enabled=False" in output
    tags = tensorboard_scalars(out / "tb-attach")
    assert sorted(tags["train/loss"]) == [1, 2, 3]
    assert tags["Eval/loss"] == {12: 0.5}
    assert not [tag for tag in tags if tag.startswith("Train/Samples/")], sorted(tags)


def test_no_empty_communication_summary_without_comms_logger(run: tuple[Path, str]) -> None:
    """With comms_logger off nothing about communication is printed at exit."""
    _, output = run
    assert "communication summary" not in output


# ---- the seed's loop: names trainmon logs too, one value a step -------------------------------

SEED30_MARK = "--- the seed's loop, 30 steps"


def seed30_user(out: Path) -> list[float]:
    """The train/loss values the seed's loop logged (the data loss), checked to differ from
    what backward got (trainmon's own train/loss), so that the writers' values tell them apart."""
    user = json.loads((out / "seed30-user.json").read_text())
    assert len(user["loss"]) == 30
    assert all(b - u > 1e-3 for u, b in zip(user["loss"], user["backward"], strict=True))
    return [float(value) for value in user["loss"]]


def raw_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """Every ``tag`` event in the folder's event files, in file order, with no purge applied."""
    events: list[tuple[int, float]] = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    number = value.simple_value if value.HasField("simple_value") else None
                    if number is None:
                        number = float(tensor_util.make_ndarray(value.tensor))
                    events.append((event.step, number))
    return events


def test_seed_loop_train_loss_is_one_tensorboard_event_a_step_the_users(
    run: tuple[Path, str],
) -> None:
    """After 30 steps of the seed's loop the TensorBoard tag train/loss holds 30 events at
    steps 1..30, the user's values, as TensorBoard's reader and the raw event files show."""
    out, _ = run
    expected = seed30_user(out)
    board = out / "seed30-tb"
    acc = EventAccumulator(str(board), size_guidance={"scalars": 0})
    acc.Reload()
    read = [(event.step, event.value) for event in acc.Scalars("train/loss")]
    raw = raw_scalars(board, "train/loss")
    for events in (read, raw):
        assert [step for step, _ in events] == list(range(1, 31))
        assert [value for _, value in events] == pytest.approx(expected, rel=1e-6)
    assert [step for step, _ in raw_scalars(board, "train/lr")] == list(range(1, 31))


def test_seed_loop_train_loss_is_one_csv_row_a_step_the_users(run: tuple[Path, str]) -> None:
    """After 30 steps of the seed's loop train_loss.csv holds 30 rows at steps 1..30 with the
    user's values."""
    out, _ = run
    expected = seed30_user(out)
    with (out / "seed30-csv" / "train_loss.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "loss"]
    assert [int(step) for step, _ in rows[1:]] == list(range(1, 31))
    assert [float(value) for _, value in rows[1:]] == pytest.approx(expected, rel=1e-12)


def test_seed_loop_train_loss_is_one_journal_value_a_step_the_users(
    run: tuple[Path, str],
) -> None:
    """After 30 steps of the seed's loop metrics.jsonl holds one train/loss a step, at steps
    1..30, with the user's values."""
    out, _ = run
    expected = seed30_user(out)
    lines = (out / "seed30-journal" / "metrics.jsonl").read_text().splitlines()
    losses = [
        (record["step"], record["values"]["train/loss"])
        for record in map(json.loads, lines)
        if record["kind"] == "scalars" and "train/loss" in record["values"]
    ]
    assert [step for step, _ in losses] == list(range(1, 31))
    assert [value for _, value in losses] == pytest.approx(expected, rel=1e-12)


def test_seed_loop_says_once_that_the_users_values_are_kept(run: tuple[Path, str]) -> None:
    """One log line, not one a step, names the metrics the user logs that trainmon logs too."""
    _, output = run
    after = output[output.index(SEED30_MARK) :]
    said = [line for line in after.splitlines() if "your value is kept" in line]
    assert len(said) == 1, said
    assert "'train/loss'" in said[0] and "'train/lr'" in said[0]
