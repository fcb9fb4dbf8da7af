"""Every reader tells the same truth: one run written to the journal, TensorBoard and CSV
reads back with the same step count, range and alert count from each folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.cli import main

STEPS = 40
HOT = range(10, 16)  # train/loss above the threshold: one firing at 10, one resolve at 16


@pytest.fixture(scope="module")
def three_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run with TensorBoard, CSV and the journal, and a rule that fires and resolves."""
    out = tmp_path_factory.mktemp("agree")
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": str(out / "csv"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "alerts": {
            "rules": [
                {
                    "name": "hot",
                    "metric": "train/loss",
                    "op": ">",
                    "threshold": 1.0,
                    "resolve_after": 1,
                }
            ],
            "sinks": [{"type": "file"}],
        },
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, STEPS + 1):
            loss = 2.0 if step in HOT else 0.5
            monitor.log({"train/loss": loss, "perf/samples_per_sec": 100.0}, step=step)
    return {"journal": out / "job", "tensorboard": out / "tb" / "job", "csv": out / "csv" / "job"}


def summary(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["summary", str(folder), "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("kind", ["journal", "tensorboard", "csv"])
def test_summary_gives_the_same_figures_from_every_folder(
    three_folders: dict[str, Path], kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Steps, range and alerts fired are the journal's, whichever folder is read: the alert
    is derived from the alerts/hot series where the folder has no alerts.jsonl."""
    got = summary(three_folders[kind], capsys)
    assert (got["steps"], got["first_step"], got["last_step"]) == (STEPS, 1, STEPS)
    assert got["alerts"]["fired"] == 1, got["alerts"]
    assert got["alerts"]["resolved"] == 1


def test_compare_on_two_tensorboard_folders_counts_the_alert(
    three_folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """compare on TensorBoard folders shows the alert that fired (not 0)."""
    folder = three_folders["tensorboard"]
    assert main(["compare", str(folder), str(folder)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "alerts fired" in ln]
    assert line.split()[2:4] == ["1", "1"], line


def test_a_samples_axis_does_not_stretch_the_step_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder holding trainmon's step-axis metrics and DeepSpeed's Train/Samples/* (x =
    samples) counts and ranges steps from the step axis only."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 11):
        writer.add_scalar("train/loss", 1.0 / step, step)
        writer.add_scalar("Train/Samples/lr", 0.1, step * 64)
    writer.close()
    got = summary(tmp_path, capsys)
    assert (got["steps"], got["first_step"], got["last_step"]) == (10, 1, 10)
