"""One rank of ``bench_scale.py``: times trainmon's per-window cross-rank reduction.

Why: at each window end every rank hands one row of 17 floats to rank 0 (one gloo ``gather``
per window, from the background thread) and rank 0 turns the table into ``<metric>/min``,
``/mean``, ``/max``, ``/argmax_rank`` and straggler metrics (``summarise_ranks``). This worker
measures, under ``torch.distributed.run`` on the CPU with gloo, what that costs per window as
the number of ranks grows.

Each rank builds a :class:`trainmon.core.cross_rank.CrossRankReducer` and a synthetic
:class:`~trainmon.core.aggregate.WindowStats` holding every metric of ``REDUCED_METRICS`` (rank
``r`` is made the slowest by ``r`` ms, so rank 0 can check the answer), a new window (later
steps) per call, since the reducer gathers each window once. Measured, each call
preceded by an untimed barrier so that ranks arrive together as they do after a training step:

* ``reducer(window)``: the whole per-window path (pack, gather, to lists, summarise);
* a bare ``dist.gather`` of the same 17 float64 on a gloo group of its own;
* on rank 0, ``summarise_ranks`` alone on the gathered table, and ``pack_window`` alone.

Rank 0 writes its numbers as JSON to ``--out``. Launched by ``bench_scale.py``::

    python -m torch.distributed.run --nproc_per_node=N --master_addr=127.0.0.1 \
        --master_port=PORT benchmarks/scale_worker.py --k 200 --out result.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import harness
from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.cross_rank import REDUCED_METRICS, CrossRankReducer, pack_window, summarise_ranks

STEPS_PER_WINDOW = 10


def synthetic_window(rank: int, number: int = 0) -> WindowStats:
    """Window ``number`` (steps ``10 * number + 1`` to ``10 * (number + 1)``) with every reduced
    metric; rank ``r``'s step time is ``100 + r`` ms. Each window must end at a later step than
    the one before: the reducer gathers a window once and skips any that ends no later."""
    metrics: dict[str, MetricStats] = {}
    for index, (name, _) in enumerate(REDUCED_METRICS):
        if name == "perf/step_time_ms":
            value = 100.0 + rank
        elif name == "perf/comm_ms":
            value = 5.0
        else:
            value = 10.0 * (index + 1) + 0.5 * rank
        metrics[name] = MetricStats(STEPS_PER_WINDOW, value, 0.9 * value, 1.1 * value, value)
    now = time.time()
    first = number * STEPS_PER_WINDOW + 1
    return WindowStats(first, first + STEPS_PER_WINDOW - 1, now - 1.0, now, metrics)


def timed(
    call: Callable[[], Any], k: int, warmup: int, barrier: bool
) -> tuple[list[int], list[int], list[int], Any]:
    """Wall, thread-CPU and process-CPU ns of ``k`` calls (after ``warmup``); the last result.
    With ``barrier`` every call starts together on all ranks (the barrier is not timed)."""
    t = harness.time_calls(call, k, warmup, before=dist.barrier if barrier else None)
    return t.wall_ns, t.thread_ns, t.process_ns, t.last


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=200, help="timed windows")
    parser.add_argument("--warmup", type=int, default=20, help="untimed windows first")
    parser.add_argument("--out", type=Path, required=True, help="rank 0 writes JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        reducer = CrossRankReducer(timeout_s=60)
        window = synthetic_window(rank)
        windows = iter([synthetic_window(rank, i) for i in range(args.warmup + args.k)])

        # 1. the whole per-window path, as the pipeline's background thread runs it (a new
        #    window each call, built beforehand)
        walls, threads, processes, result = timed(
            lambda: reducer(next(windows)), args.k, args.warmup, True
        )
        result = result or {}  # None: the reducer skipped the window; the checks then fail

        # 2. the collective alone, on a gloo group of its own
        group = dist.new_group(backend="gloo")
        mine = torch.tensor(pack_window(window), dtype=torch.float64)
        gathered: list[list[torch.Tensor] | None] = [None]

        def gather() -> None:
            rows = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
            dist.gather(mine, rows, dst=0, group=group)
            gathered[0] = rows

        gather_walls, gather_threads, _, _ = timed(gather, args.k, args.warmup, True)

        if rank == 0:
            rows = gathered[0]
            assert rows is not None
            table = [row.tolist() for row in rows]
            summ_walls, summ_threads, _, _ = timed(
                lambda: summarise_ranks(table), args.k, args.warmup, False
            )
            pack_walls, _, _, _ = timed(lambda: pack_window(window), args.k, args.warmup, False)
            checks = {
                "slowest_rank_ok": result.get("perf/slowest_rank") == world - 1,
                "argmax_ok": result.get("perf/step_time_ms/argmax_rank") == world - 1,
                # every rank's samples (its rate x its 10 steps of 100 + r ms) over the
                # slowest rank's window
                "job_samples_ok": abs(
                    result.get("perf/job_samples_per_sec", float("nan"))
                    - sum(table[r][2 + 6] * (100.0 + r) for r in range(world)) / (99.0 + world)
                )
                < 1e-6,
                "metrics_out": len(result),
            }
            payload = {
                "world_size": world,
                "k": args.k,
                "row_floats": len(table[0]),
                "bytes_gathered_per_window": world * len(table[0]) * 8,
                "collectives_per_window": 1,
                "reducer": harness.summary_us(walls),
                "reducer_thread_cpu": harness.summary_us(threads),
                "reducer_process_cpu": harness.summary_us(processes),
                "gather": harness.summary_us(gather_walls),
                "gather_thread_cpu": harness.summary_us(gather_threads),
                "summarise_ranks": harness.summary_us(summ_walls),
                "summarise_ranks_thread_cpu": harness.summary_us(summ_threads),
                "pack_window": harness.summary_us(pack_walls),
                "checks": checks,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            }
            args.out.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
