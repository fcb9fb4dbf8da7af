"""A torchrun worker: every rank logs known per-rank values through a plain Monitor.

Usage: ranks_worker.py OUTDIR MODE
MODE: "default" | "per_rank" | "cross_rank" | "hang" (rank 1 stops logging after step 10 and
sits in a long sleep; cross-rank statistics on, with a 3 s collective timeout) | "last_rank"
(trainmon.log_rank "last", cross-rank statistics on).
Each rank logs steps 1..40 with the values of :func:`values`, so the test can recompute them.
"""

from __future__ import annotations

import json
import sys
import time

import torch.distributed as dist

import trainmon


def values(rank: int, step: int) -> dict[str, float]:
    """What rank ``rank`` logs at ``step`` (the test recomputes these)."""
    step_ms = 100.0 + 0.5 * step
    comm = 60.0 if rank != 1 else 5.0  # rank 1 is the straggler: the others wait for it
    return {
        "perf/step_time_ms": step_ms,
        "perf/comm_ms": comm,
        "perf/samples_per_sec": 1000.0 / step_ms * (1 + rank),
        "mem/rss_mb": 100.0 + rank,
        "train/loss": 1.0 / step,
    }


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = {
        "steps_per_print": 10,
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": out + "/csv", "job_name": "job"},
        "console": {"enabled": rank == 0 or mode in ("per_rank", "last_rank")},
        "trainmon": {
            "per_rank_output": mode == "per_rank",
            "cross_rank": "on" if mode in ("cross_rank", "hang", "last_rank") else "off",
            "log_rank": "last" if mode == "last_rank" else 0,
            "collective_timeout_s": 3 if mode == "hang" else 20,
        },
    }
    with trainmon.Monitor(config) as monitor:
        started = time.perf_counter()
        for step in range(1, 41):
            if mode == "hang" and rank == 1 and step > 10:
                time.sleep(8)  # a rank stuck in its training loop
                break
            monitor.log(values(rank, step), step=step)
            time.sleep(0.01)
        loop_s = time.perf_counter() - started
        monitor.flush()
        kinds = [w.kind for w in monitor.writers]
        print(json.dumps({"rank": rank, "writers": kinds, "loop_s": loop_s}), flush=True)
    if mode != "hang":
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
