"""Eight ranks cost each rank what two do: one gather per window of one row, same bytes.

A real ``torch.distributed.run`` at 2 and at 8 CPU ranks (gloo) of ``benchmarks/scale_worker.py``
with ``--k 0``: a tiny model trained under ``trainmon.initialize`` (wall-clock breakdown on, so
the slowest rank is told from the ones waiting for it), the last rank sleeping 30 ms a step
as a slow data loader would, beside the same loop without trainmon. The worker wraps every
``torch.distributed`` collective before trainmon is imported and counts, on every rank, the
calls made from trainmon's code and the bytes each rank sends in them; rank 0 gathers the
counts (with counting off) and writes them with its journal's windows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainmon
from conftest import torchrun
from trainmon.core.aggregate import WindowStats
from trainmon.core.cross_rank import pack_window
from trainmon.core.nodes import IDENTITY_COLUMNS

WORKER = Path(__file__).resolve().parents[1] / "benchmarks" / "scale_worker.py"
WINDOWS = 4  # one block of 4 windows of 10 steps, with trainmon and without
SIZES = (2, 8)
#: The row trainmon gathers, from its own code: every window's, and the first window's.
ROW_BYTES = 8 * len(pack_window(WindowStats(1, 1, 0.0, 0.0, {})))
FIRST_ROW_BYTES = ROW_BYTES + 8 * IDENTITY_COLUMNS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """Rank 0's answer at each size, with the run folder trainmon wrote."""
    found = {}
    for ranks in SIZES:
        folder = tmp_path_factory.mktemp(f"ranks{ranks}")
        out = folder / "rank0.json"
        torchrun(
            WORKER,
            ranks,
            "--k=0",
            "--rounds=1",
            "--warmup-rounds=0",
            f"--block-windows={WINDOWS}",
            "--window-steps=10",
            f"--slow-rank={ranks - 1}",
            "--slow-ms=30",
            "--breakdown",
            f"--run-dir={folder / 'run'}",
            f"--out={out}",
            timeout=150,
        )
        found[ranks] = json.loads(out.read_text(encoding="utf-8"))
        found[ranks]["run_dir"] = folder / "run"
    return found


def per_window(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each rank's trainmon collectives per window, their functions and bytes."""
    return [
        (
            rank["collectives_per_window"],
            rank["monitoring_calls"],
            tuple(rank["ops"]),
            rank["first_window_bytes"],
            tuple(rank["later_window_bytes"]),
        )
        for rank in result["training"]["per_rank"]
    ]


@pytest.mark.parametrize("ranks", SIZES)
def test_one_gather_per_window_of_one_row_per_rank(
    runs: dict[int, dict[str, Any]], ranks: int
) -> None:
    """Every rank makes one gather per window (from trainmon's background thread), sending
    the row pack_window builds (with the node identity the first time), nothing else."""
    result = runs[ranks]
    training = result["training"]
    assert training["windows"] == WINDOWS
    assert [r["rank"] for r in training["per_rank"]] == list(range(ranks))
    expected = (1.0, WINDOWS, ("gather",), FIRST_ROW_BYTES, (ROW_BYTES,))
    assert per_window(result) == [expected] * ranks
    for rank in training["per_rank"]:
        assert rank["setup_monitoring_calls"] == 1  # creating trainmon's gloo group, once
        assert rank["training_collectives_per_step"] == 1.0  # the engine's gradient all-reduce
    monitoring = [
        c for c in training["counts_rank0"] if c["who"] == "monitoring" and c["phase"] == "run"
    ]
    assert [(c["op"], c["caller"], c["calls"]) for c in monitoring] == [
        ("gather", "trainmon/core/cross_rank.py:__call__", WINDOWS)
    ]
    assert monitoring[0]["thread"] != "MainThread"  # never on the training thread


def test_eight_ranks_send_per_window_what_two_ranks_send(runs: dict[int, dict[str, Any]]) -> None:
    """Collectives per window and bytes per window per rank are the same at 2 and 8 ranks."""
    two, eight = per_window(runs[2]), per_window(runs[8])
    assert set(two) == set(eight) and len(set(eight)) == 1
    sent = {
        size: {r["monitoring_bytes_sent"] for r in runs[size]["training"]["per_rank"]}
        for size in SIZES
    }
    assert sent[2] == sent[8] == {FIRST_ROW_BYTES + (WINDOWS - 1) * ROW_BYTES}


@pytest.mark.parametrize("ranks", SIZES)
def test_rank_zero_journal_names_the_slow_rank(runs: dict[int, dict[str, Any]], ranks: int) -> None:
    """Rank 0's journal holds every window's statistics across ranks, and after the first
    window (start-up) names the rank that sleeps each step as the slowest."""
    records = list(trainmon.read_journal(runs[ranks]["run_dir"] / "scale"))
    assert (records[0]["rank"], records[0]["world_size"]) == (0, ranks)
    windows = [r for r in records if r["kind"] == "window"]
    assert [w["last_step"] for w in windows] == [10, 20, 30, 40]
    for window in windows:
        stats = window["stats"]
        for name in ("perf/step_time_ms", "perf/comm_ms", "perf/samples_per_sec"):
            assert {f"{name}/{s}" for s in ("min", "mean", "max", "argmax_rank")} <= set(stats)
        assert stats["perf/job_samples_per_sec"]["last"] > 0
        assert "perf/slowest_rank" in stats
    for window in windows[1:]:
        stats = window["stats"]
        assert stats["perf/slowest_rank"]["last"] == ranks - 1
        assert stats["perf/straggler_ratio"]["last"] > 1.5
    assert runs[ranks]["training"]["journal"]["slowest_rank"][1:] == [ranks - 1] * 3
