"""The hang verdict at 1,024 ranks fits on one screen: ranks that wait in the same place are
grouped and written as ranges, the ranks behind are named with where they are, a rank with no
sign of life is named as such, and `trainmon hang` prints blocks for those ranks only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from trainmon.alerts.hang import diagnose, write_record
from trainmon.cli import main

WORLD = 1024


def _record(rank: int, now: float, **overrides: Any) -> dict[str, Any]:
    """A rank inside all_reduce #812 at step 812, as the watchdog writes it."""
    record: dict[str, Any] = {
        "rank": rank,
        "world_size": WORLD,
        "step": 812,
        "time": now,
        "stalled_since": now - 600,
        "host": f"node{rank // 8:03d}",
        "pid": 1000 + rank,
        "thread": "MainThread",
        "collective": {"op": "all_reduce", "seq": 812, "inside": True, "group": None},
        "frames": [
            {"function": "all_reduce", "file": "torch/distributed/c10d.py", "line": 9,
             "kind": "library"},
            {"function": "train_step", "file": "train.py", "line": 12, "kind": "user"},
        ],
    }  # fmt: skip
    record.update(overrides)
    return record


def _job(now: float) -> dict[int, dict[str, Any]]:
    """1,022 ranks in all_reduce #812; rank 17 in its data loader at step 811; rank 903's
    record 40 s older than the others (it went quiet)."""
    records = {rank: _record(rank, now) for rank in range(WORLD)}
    records[17] = _record(
        17,
        now,
        step=811,
        collective={"op": "all_reduce", "seq": 811, "inside": False, "group": None},
        frames=[{"function": "load_batch", "file": "data.py", "line": 40, "kind": "user"}],
    )
    records[903] = _record(
        903,
        now - 40,
        step=811,
        collective={"op": "all_reduce", "seq": 811, "inside": False, "group": None},
        frames=[{"function": "forward", "file": "model.py", "line": 77, "kind": "user"}],
    )
    return records


def test_the_verdict_of_1024_ranks_groups_them_on_one_line() -> None:
    """The verdict names the 1,022 waiting ranks as ranges, rank 17 and where it is, and rank
    903's silence, in under 300 characters."""
    verdict = diagnose(_job(time.time()))
    assert verdict.line == (
        "1,022 ranks (0–16, 18–902, 904–1023) wait in all_reduce #812; rank 17 is at step 811 "
        "in load_batch (data.py:40); rank 903: no sign of life for 40 s"
    )
    assert verdict.behind == [17, 903] and len(verdict.waiting["all_reduce #812"]) == 1022


def test_ranks_behind_in_the_same_place_are_one_group() -> None:
    """Forty ranks in the same data loader line are one group, written as ranges."""
    now = time.time()
    records = _job(now)
    for rank in range(100, 140):
        records[rank] = dict(records[17], rank=rank)
    line = diagnose(records).line
    assert "41 ranks (17, 100–139) are at step 811 in load_batch (data.py:40)" in line
    assert len(line) < 300


def test_trainmon_hang_at_1024_ranks_prints_a_screen_or_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From 1,024 record files, `trainmon hang` prints the verdict and blocks for the ranks
    behind and one waiting rank, counts the rest, and `--all` prints every rank."""
    now = time.time()
    for record in _job(now).values():
        write_record(tmp_path, record)
    assert main(["hang", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1,022 ranks (0–16, 18–902, 904–1023) wait in all_reduce #812")
    assert len(out) < 60, len(out)
    assert any(line.startswith("rank 17 (node002") for line in out)
    assert any("1,021 more ranks wait where the verdict says" in line for line in out)
    assert main(["hang", str(tmp_path), "--all"]) == 0
    every = capsys.readouterr().out.splitlines()
    assert sum(1 for line in every if line.startswith("rank ") and "pid" in line) == WORLD
