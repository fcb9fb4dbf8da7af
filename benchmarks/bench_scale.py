"""How trainmon's per-window cross-rank cost grows with the number of ranks.

Why: under ``trainmon.initialize`` each window end gathers one row per rank on rank 0 (one
gloo ``gather`` of 17 float64 per rank, from the background thread) and rank 0 summarises the
table. A monitor that does one collective per metric, or all-gathers everywhere, gets slower
as jobs grow; this benchmark shows what this design costs per window at 1, 2, 4 and 8 ranks on
one machine and what that means at 1,024 ranks.

For each N it launches ``python -m torch.distributed.run --nproc_per_node=N
--master_addr=127.0.0.1 --master_port=<free port> benchmarks/scale_worker.py`` (gloo, CPU;
see that file for what each rank times) and reads rank 0's numbers. Then, in this process
(no collective involved), it times rank 0's local share of a window directly for 1 to 1,024
rows: ``summarise_ranks`` alone, and the reducer's rank-0 bookkeeping (one receive buffer and
one ``tolist`` per rank, then ``summarise_ranks``).

On a machine with fewer cores than ranks (the team VM has 2), the gather's time is set by
the OS scheduler (every rank has to be scheduled for a gather to finish), not by trainmon or
gloo; the extrapolation of the gather to 1,024 ranks is therefore only an upper-bound sketch.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--ranks 1 2 4 8] [--k 200] [--json out]``
(a quick run: ``--ranks 1 2 --k 20 --local-sizes 1 8 64``)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import harness
from trainmon.core.cross_rank import REDUCED_METRICS, summarise_ranks

HERE = Path(__file__).resolve().parent
WORKER = HERE / "scale_worker.py"
TARGET_RANKS = 1024
# a row as pack_window builds it: [last_step, busy_ms, one value per reduced metric, elapsed_ms]
ROW_FLOATS = 3 + len(REDUCED_METRICS)
LAUNCH_TIMEOUT_S = 900


def free_port() -> int:
    """A TCP port nobody listens on right now (for the rendezvous on 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def launch(ranks: int, k: int, warmup: int) -> dict[str, Any]:
    """Run the worker under ``torch.distributed.run`` with ``ranks`` processes; rank 0's JSON."""
    with tempfile.TemporaryDirectory(prefix="trainmon-bench-scale-") as tmp:
        out = Path(tmp) / "rank0.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={ranks}",
            "--nnodes=1",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(WORKER),
            f"--k={k}",
            f"--warmup={warmup}",
            f"--out={out}",
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        started = time.perf_counter()
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
        )
        if done.returncode != 0 or not out.exists():
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise RuntimeError(f"{ranks} ranks: torch.distributed.run exited {done.returncode}")
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        result["launch_seconds"] = time.perf_counter() - started
        return result


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    if len(xs) < 2:
        return (ys[0] if ys else 0.0), 0.0
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def _rows(world: int) -> list[list[float]]:
    """A table like the one rank 0 gathers: rank r slowest by r ms, every metric present."""
    rows = []
    for rank in range(world):
        row = [10.0, 95.0 + rank]
        row += [10.0 * (i + 1) + 0.5 * rank for i in range(len(REDUCED_METRICS))]
        row.append(1000.0)  # elapsed_ms: one second per window on every rank
        rows.append(row)
    return rows


def _median_us(call: Any, repeat: int) -> float:
    return statistics.median(harness.time_calls(call, repeat).wall_ns) / 1e3


def local_share(sizes: Sequence[int], repeat: int) -> list[dict[str, float]]:
    """Rank 0's local work per window, measured directly for tables of ``sizes`` rows."""
    torch.set_num_threads(1)
    results = []
    for world in sizes:
        table = _rows(world)
        tensors = [torch.tensor(row, dtype=torch.float64) for row in table]

        def bookkeeping(tensors: list[torch.Tensor] = tensors, world: int = world) -> None:
            # what CrossRankReducer.__call__ does on rank 0 besides the gather itself
            mine = tensors[0]
            _buffers = [torch.empty_like(mine) for _ in range(world)]
            summarise_ranks([row.tolist() for row in tensors])

        results.append(
            {
                "rows": world,
                "summarise_us": _median_us(lambda t=table: summarise_ranks(t), repeat),
                "rank0_local_us": _median_us(bookkeeping, repeat),
                "bytes": world * ROW_FLOATS * 8,
            }
        )
    return results


def print_report(results: list[dict[str, Any]], local: list[dict[str, float]]) -> None:
    """The measured table, the direct rank-0 measurements and the extrapolation, in Markdown."""
    load = harness.load_average()
    print()
    print(
        f"Machine: {os.cpu_count()} CPUs, load average {load}"
        f"; Python {platform.python_version()}, torch {torch.__version__}, gloo on 127.0.0.1; "
        f"K = {results[0]['k']} timed windows per N, each after a barrier."
    )
    print()
    lines = []
    for r in results:
        red = r["reducer"]
        checks = r["checks"]
        ok = checks["slowest_rank_ok"] and checks["argmax_ok"] and checks["job_samples_ok"]
        lines.append(
            (
                str(r["world_size"]),
                f"{red['median_us']:.0f} [{red['p10_us']:.0f}-{red['p90_us']:.0f}]",
                f"{r['gather']['median_us']:.0f}",
                f"{r['summarise_ranks']['median_us']:.1f}",
                f"{r['pack_window']['median_us']:.1f}",
                f"{r['reducer_thread_cpu']['median_us']:.0f}",
                f"{r['reducer_process_cpu']['median_us']:.0f}",
                f"{r['bytes_gathered_per_window']:,}",
                str(r["collectives_per_window"]),
                f"{'yes' if ok else 'NO'} ({checks['metrics_out']} metrics)",
            )
        )
    harness.print_markdown_table(
        (
            "ranks",
            "reducer(window) µs, median [p10-p90]",
            "gather alone µs",
            "summarise_ranks µs",
            "pack_window µs",
            "rank-0 thread CPU µs/window",
            "rank-0 process CPU µs/window",
            "bytes gathered/window",
            "collectives/window",
            "result checked",
        ),
        lines,
    )
    print()
    print("Rank 0's local share of a window, measured directly in one process (no collective):")
    print()
    harness.print_markdown_table(
        ("rows (ranks)", "summarise_ranks µs", "buffers + tolist + summarise µs", "bytes"),
        [
            (
                str(row["rows"]),
                f"{row['summarise_us']:.1f}",
                f"{row['rank0_local_us']:.1f}",
                f"{int(row['bytes']):,}",
            )
            for row in local
        ],
    )

    ns = [float(r["world_size"]) for r in results]
    summ_a, summ_b = fit_line(ns, [r["summarise_ranks"]["median_us"] for r in results])
    gath_a, gath_b = fit_line(ns, [r["gather"]["median_us"] for r in results])
    cpu_a, cpu_b = fit_line(ns, [r["reducer_thread_cpu"]["median_us"] for r in results])
    direct = next((row for row in local if row["rows"] == TARGET_RANKS), None)
    n = TARGET_RANKS
    print()
    print(f"Extrapolation to {n:,} ranks (least-squares lines through the measured N):")
    print()
    print(
        f"* bytes gathered on rank 0 per window: {n} x {ROW_FLOATS} x 8 = {n * ROW_FLOATS * 8:,} "
        f"B = {n * ROW_FLOATS * 8 / 1024:.0f} KiB; still ONE gather per window (no per-metric "
        f"collectives), from the background thread, never on the training stream."
    )
    print(
        f"* summarise_ranks: {summ_a:.1f} µs + {summ_b:.2f} µs/rank -> "
        f"{summ_a + summ_b * n:,.0f} µs at {n} ranks"
        + (f" (measured directly at {n} rows: {direct['summarise_us']:,.0f} µs)" if direct else "")
    )
    local_a, local_b = fit_line(
        [float(row["rows"]) for row in local], [row["summarise_us"] for row in local]
    )
    whole_a, whole_b = fit_line(
        [float(row["rows"]) for row in local], [row["rank0_local_us"] for row in local]
    )
    print(
        f"* per-rank slopes from the direct measurements (1 to {local[-1]['rows']:.0f} rows): "
        f"summarise_ranks {local_b:.2f} µs/rank (intercept {local_a:+.0f} µs), rank 0's "
        f"whole local share {whole_b:.2f} µs/rank (intercept {whole_a:+.0f} µs); the slope "
        f"through N = 1..8 above "
        f"rests on four noisy points a few µs apart"
    )
    if direct:
        print(
            f"* rank 0's whole local share at {n} rows (receive buffers, tolist, summarise), "
            f"measured: {direct['rank0_local_us']:,.0f} µs per window"
        )
    print(
        f"* rank-0 thread CPU of reducer(window): {cpu_a:.0f} µs + {cpu_b:.1f} µs/rank -> "
        f"{cpu_a + cpu_b * n:,.0f} µs at {n} ranks (with 8 processes on "
        f"{os.cpu_count()} cores this slope includes context switches; the direct local share "
        f"above is the better guide)"
    )
    print(
        f"* gather wall time: {gath_a:.0f} µs + {gath_b:.0f} µs/rank -> "
        f"{(gath_a + gath_b * n) / 1e3:,.1f} ms at {n} ranks. With more processes than the "
        f"{os.cpu_count()} cores this slope is the OS scheduler's, not gloo's: read it as an "
        f"upper-bound sketch, not a prediction for a real cluster (where rank 0 receives "
        f"{n - 1} small messages over the network in gloo's flat gather)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--k", type=int, default=200, help="timed windows per N")
    parser.add_argument("--warmup", type=int, default=20, help="untimed windows first")
    parser.add_argument("--local-sizes", type=int, nargs="+", default=[1, 8, 64, 256, TARGET_RANKS])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    results = []
    for ranks in args.ranks:
        print(f"launching {ranks} rank(s) ...", file=sys.stderr, flush=True)
        result = launch(ranks, args.k, args.warmup)
        print(f"  done in {result['launch_seconds']:.1f} s", file=sys.stderr, flush=True)
        results.append(result)
    local = local_share(args.local_sizes, repeat=max(args.k, 50))
    print_report(results, local)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"distributed": results, "local": local}, indent=2), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
