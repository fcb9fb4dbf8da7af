"""A torchrun worker: every rank logs known per-rank values through a plain Monitor.

Usage: ranks_worker.py OUTDIR MODE   (MODE: "default" | "per_rank" | "cross_rank")
Rank r logs, for steps 1..40: perf/step_time_ms = 10 + r (+ 50 on rank 1 for "slow"),
perf/comm_ms = 50 - 10 r ..., so the test can compute the cross-rank statistics itself.
"""

from __future__ import annotations

import json
import sys

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
        "console": {"enabled": rank == 0 or mode == "per_rank"},
        "trainmon": {
            "per_rank_output": mode == "per_rank",
            "cross_rank": "on" if mode == "cross_rank" else "off",
            "collective_timeout_s": 20,
        },
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 41):
            monitor.log(values(rank, step), step=step)
        monitor.flush()
        print(json.dumps({"rank": rank, "writers": [w.kind for w in monitor.writers]}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
