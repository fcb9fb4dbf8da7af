"""The hang verdict at many ranks, simulated in one process: what ``trainmon hang`` reads, how
long it takes and how much memory, and how long its verdict is, for 8 to 4,096 ranks.

Why: a hang at 1,024 ranks is when the verdict matters most and when a tool that prints a line
per rank, or reads megabytes per rank, stops being usable. Each rank's record is synthetic
but shaped as the stall watchdog writes it (12 frames kept, a collective), one file per rank
in one folder (the shared-folder layout); one rank is behind in its data loader, one went
quiet 40 s before the others, the rest wait in the same all_reduce. ``trainmon hang`` runs as
users call it (the CLI's entry point, in this process, its output captured), and the window
aggregation across ranks at the same sizes is ``bench_scale.py``'s (its local share table).

Run: ``.venv/bin/python benchmarks/bench_hang_scale.py [--ranks 8 64 1024 4096]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import harness
from trainmon.alerts.hang import write_record
from trainmon.cli import main as cli


def record(rank: int, world: int, now: float) -> dict[str, Any]:
    """One rank's record with 12 frames, as the watchdog keeps them."""
    frames = [
        {"function": f"frame_{i}", "file": f"/opt/venv/lib/python3.11/site-packages/lib{i}.py",
         "line": 100 + i, "kind": "library"}
        for i in range(11)
    ]  # fmt: skip
    behind = rank == 17
    frames.insert(
        0,
        {"function": "load_batch" if behind else "all_reduce",
         "file": "data.py" if behind else "torch/distributed/distributed_c10d.py",
         "line": 40, "kind": "user" if behind else "library"},
    )  # fmt: skip
    return {
        "rank": rank,
        "world_size": world,
        "step": 811 if behind else 812,
        "time": now - (40.0 if rank == world - 1 else 0.0),
        "stalled_since": now - 600,
        "host": f"node{rank // 8:04d}",
        "pid": 10_000 + rank,
        "thread": "MainThread",
        "job": "bench",
        "collective": {"op": "all_reduce", "seq": 811 if behind else 812,
                       "inside": not behind, "group": None},
        "frames": frames,
    }  # fmt: skip


def measure(world: int) -> dict[str, Any]:
    """Write ``world`` records, then time ``trainmon hang`` on them (and its peak memory)."""
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="trainmon-hang-") as folder:
        for rank in range(world):
            write_record(Path(folder), record(rank, world, now))
        size = sum(p.stat().st_size for p in Path(folder).iterdir())
        out = io.StringIO()
        tracemalloc.start()
        began = time.perf_counter()
        with contextlib.redirect_stdout(out):
            assert cli(["hang", folder]) == 0
        seconds = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    lines = out.getvalue().splitlines()
    return {
        "ranks": world,
        "bytes_read": size,
        "seconds": seconds,
        "peak_mb": peak / 1e6,
        "verdict_chars": len(lines[0]),
        "output_lines": len(lines),
        "verdict": lines[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 1024, 4096])
    args = parser.parse_args()
    info = harness.machine_info()
    print(harness.machine_line(info))
    results = [measure(world) for world in args.ranks]
    harness.print_markdown_table(
        ["ranks", "read", "per rank", "time", "peak memory", "verdict", "output"],
        [
            [
                f"{r['ranks']:,}",
                f"{r['bytes_read'] / 1e6:.2f} MB",
                f"{r['bytes_read'] / r['ranks'] / 1e3:.2f} kB",
                f"{r['seconds'] * 1e3:.0f} ms",
                f"{r['peak_mb']:.1f} MB",
                f"{r['verdict_chars']} chars",
                f"{r['output_lines']} lines",
            ]
            for r in results
        ],
    )
    print(f"\nverdict at {results[-1]['ranks']:,} ranks:\n  {results[-1]['verdict']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
