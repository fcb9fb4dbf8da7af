"""The seed's ``engine.monitor.write_events`` calls after ``trainmon.attach`` on a real engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
