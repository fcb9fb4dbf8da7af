"""Events on another x axis (DeepSpeed's global_samples) reach only the writers named, outside
the step windows; ``attach``'s config merge keeps the engine's config under the user's."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

import trainmon
from trainmon.core.aggregate import WindowStats
from trainmon.core.events import StepScalars
from trainmon.integrations.deepspeed import merge_configs


class Recorder(trainmon.Writer):
    """Keeps what it is given."""

    kind: ClassVar[str] = "jsonl"

    def __init__(self) -> None:
        self.records: list[StepScalars] = []
        self.windows: list[WindowStats] = []

    def write(self, records: Sequence[StepScalars]) -> None:
        self.records.extend(records)

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        self.windows.extend(windows)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_side_events_skip_windows_and_other_writers(tmp_path: Path) -> None:
    """Side events at step 4096 go to the CSV writer only; windows still close at steps 2
    and 4 with the training metrics alone."""
    from trainmon.writers.csv import CsvWriter

    recorder = Recorder()
    csv_writer = CsvWriter(tmp_path)
    config = {"steps_per_print": 2, "console": {"enabled": False}}
    with trainmon.Monitor(config, writers=[recorder, csv_writer]) as monitor:
        for step in range(1, 5):
            monitor.step = step
            monitor.write_events([("train/loss", float(step))])
            monitor.write_side_events([("Train/Samples/lr", 0.5, step * 1024)], {"csv"})
    assert [r.step for r in recorder.records] == [1, 2, 3, 4]
    assert all("Train/Samples/lr" not in r.values for r in recorder.records)
    assert [(w.first_step, w.last_step) for w in recorder.windows] == [(1, 2), (3, 4)]
    assert all("Train/Samples/lr" not in w.metrics for w in recorder.windows)
    with (tmp_path / "Train_Samples_lr.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [["step", "lr"]] + [[str(s * 1024), "0.5"] for s in range(1, 5)]


def test_side_events_need_a_step() -> None:
    """A side event without its own step is refused at the call, naming it."""
    with (
        trainmon.Monitor({"console": {"enabled": False}}, writers=[]) as monitor,
        pytest.raises(TypeError, match="Train/Samples/lr"),
    ):
        monitor.write_side_events([("Train/Samples/lr", 0.5)], {"csv"})


def test_merge_keeps_engine_sections_under_the_users() -> None:
    """Sections merge key by key; the user's values win; other keys stay."""
    base = {"tensorboard": {"enabled": True, "job_name": "a"}, "steps_per_print": 10}
    over = {"tensorboard": {"job_name": "b"}, "jsonl": {"enabled": True}}
    assert merge_configs(base, over) == {
        "tensorboard": {"enabled": True, "job_name": "b"},
        "steps_per_print": 10,
        "jsonl": {"enabled": True},
    }
    assert base["tensorboard"] == {"enabled": True, "job_name": "a"}
