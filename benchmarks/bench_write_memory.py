"""RSS while logging 1M scalars through ``Monitor.write_events`` (TensorBoard + JSONL).

Why: the queue is bounded and no per-step history is kept, so once the queue has filled (the
loop logs far faster than the writers drain, and ``write_events`` waits for room, counting any
drop) memory must stay flat. RSS and the number of queued events are sampled every
``--every`` scalars in a fresh process.

Run: ``.venv/bin/python benchmarks/bench_write_memory.py [--scalars 1000000] [--json out.json]``
(``--quick``: 200,000 scalars); ``bench_write_path.py --memory [--memory-scalars N]`` runs the
same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import harness
from write_path.workload import (
    DEFAULT_QUEUE_SIZE,
    INFO_MODULES,
    NAMES,
    PER_STEP,
    ROWS_MASK,
    float_rows,
    trainmon_config,
)


def work_memory(scalars: int, every: int, folder: Path, queue_size: int) -> dict[str, Any]:
    """Log ``scalars`` through TB + JSONL, sampling RSS every ``every`` scalars."""
    import psutil

    import trainmon

    process = psutil.Process()
    rows = float_rows()
    monitor = trainmon.Monitor(trainmon_config(folder, ("tensorboard", "jsonl"), queue_size))
    write = monitor.write_events
    n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
    series = [{"scalars": 0, "rss_mib": process.memory_info().rss / 2**20, "pending": 0}]
    steps_per_sample = max(1, every // PER_STEP)
    step = 0
    t0 = time.perf_counter()
    while step * PER_STEP < scalars:
        for s in range(step, step + steps_per_sample):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            monitor.step = s
            write([(n0, a), (n1, b), (n2, c), (n3, d), (n4, e), (n5, f), (n6, g), (n7, h)])
        step += steps_per_sample
        series.append(
            {
                "scalars": step * PER_STEP,
                "rss_mib": process.memory_info().rss / 2**20,
                "pending": monitor.pending_events,
            }
        )
    elapsed = time.perf_counter() - t0
    monitor.close()
    after = process.memory_info().rss / 2**20
    return {
        "scalars": step * PER_STEP,
        "series": series,
        "rss_after_close_mib": after,
        "dropped": monitor.dropped_events,
        "elapsed_s": elapsed,
        "queue_size": queue_size,
    }


def report(
    scalars: int, every: int, queue_size: int, json_path: str = "", tmp: str | None = None
) -> int:
    """Run the series in a fresh process and print it (``bench_write_path.py --memory`` too)."""
    base = Path(tempfile.mkdtemp(prefix="bench_memory_", dir=tmp))
    try:
        result = harness.run_worker(
            __file__,
            [
                "--worker",
                "--scalars",
                str(scalars),
                "--every",
                str(every),
                "--queue-size",
                str(queue_size),
                "--folder",
                str(base),
            ],
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    info = harness.machine_info(INFO_MODULES)
    print("# RSS while logging through Monitor.write_events (TB + JSONL)")
    print(harness.machine_line(info))
    if "error" in result:
        print("failed:", result["error"])
        return 1
    print(
        f"{result['scalars']:,} scalars in {result['elapsed_s']:.1f} s, "
        f"queue_size {result['queue_size']:,}, dropped {result['dropped']}\n"
    )
    harness.print_markdown_table(
        ("scalars", "RSS MiB", "queued events"),
        [
            (f"{p['scalars']:,}", f"{p['rss_mib']:.1f}", f"{p['pending']:,}")
            for p in result["series"]
        ],
    )
    print(f"\nRSS after close: {result['rss_after_close_mib']:.1f} MiB")
    series = result["series"]
    if len(series) > 3:
        later = [p["rss_mib"] for p in series[3:]]
        print(
            f"after warm-up (from {series[3]['scalars']:,} scalars): min {min(later):.1f}, "
            f"max {max(later):.1f}, last - first {later[-1] - later[0]:+.1f} MiB"
        )
    if json_path:
        Path(json_path).write_text(json.dumps({"machine": info, "memory": result}, indent=2))
        print(f"wrote {json_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--scalars", type=int, default=1_000_000, help="scalars to log (1M)")
    parser.add_argument("--every", type=int, default=100_000, help="sample RSS every N scalars")
    parser.add_argument("--queue-size", type=int, default=DEFAULT_QUEUE_SIZE)
    parser.add_argument("--quick", action="store_true", help="smoke run: 200,000 scalars")
    parser.add_argument("--json", default="", help="also write the result to this JSON file")
    parser.add_argument("--tmp", default=None, help="folder for the files the writers write")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.scalars = min(args.scalars, 200_000)
    if args.worker:
        try:
            folder = Path(args.folder or tempfile.mkdtemp())
            result = work_memory(args.scalars, args.every, folder, args.queue_size)
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        harness.emit_result(result)
        return 0
    return report(args.scalars, args.every, args.queue_size, args.json, args.tmp)


if __name__ == "__main__":
    sys.exit(main())
