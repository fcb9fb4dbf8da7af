"""How trainmon's cross-rank cost grows with the number of ranks, measured at 1, 2, 4 and 8.

Why: under ``trainmon.initialize`` each window end gathers one row per rank on rank 0 (one
gloo ``gather`` of :data:`ROW_FLOATS` float64 per rank, from the background thread; the first
window's row also carries :data:`~trainmon.core.nodes.IDENTITY_COLUMNS` floats of node
identity) and rank 0 summarises the table. A monitor that does one collective per metric, or
all-gathers everywhere, gets slower as jobs grow; this benchmark counts what trainmon actually
calls per window at each N, times the reduction, and compares a tiny training loop with and
without trainmon: the training thread's cost per step and the job's steps x ranks / s.

For each N it launches ``python -m torch.distributed.run --nproc_per_node=N
--master_addr=127.0.0.1 --master_port=<free port> benchmarks/scale_worker.py`` (gloo, CPU,
``OMP_NUM_THREADS=1``; see that file for what each rank times and how collectives are
counted: by wrapping torch.distributed's functions before trainmon is imported) and reads
rank 0's numbers. Then, in this process (no collective involved), it times rank 0's local
share of a window directly for 1 to 1,024 rows: ``summarise_ranks`` alone, and the
reducer's rank-0 bookkeeping (one ``(ranks, row)`` receive buffer, ``tolist``, then
``summarise_ranks``).

On a machine with fewer cores than ranks (the team VM has 2), every wall time here, the
gather's, a training step's and the job's rate, is set by the OS scheduler (every rank has to
be scheduled for a collective to finish), not by trainmon or gloo; the counts and bytes are
exact whatever the machine, and the extrapolation of the gather to 1,024 ranks is only an
upper-bound sketch.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--ranks 1 2 4 8] [--k 200] [--rounds 30]
[--json out]`` (a quick run: ``--ranks 1 2 --k 20 --rounds 3 --local-sizes 1 8 64``)
"""

from __future__ import annotations

import argparse
import json
import os
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
from trainmon.core.aggregate import WindowStats
from trainmon.core.cross_rank import ELAPSED_COLUMN, REDUCED_METRICS, pack_window, summarise_ranks
from trainmon.core.nodes import IDENTITY_COLUMNS

HERE = Path(__file__).resolve().parent
WORKER = HERE / "scale_worker.py"
TARGET_RANKS = 1024
#: Floats in a rank's row, as trainmon's own ``pack_window`` builds it (for an empty window:
#: every metric NaN, the length is the same); the first window's row adds the node identity.
ROW_FLOATS = len(pack_window(WindowStats(1, 1, 0.0, 0.0, {})))
FIRST_ROW_FLOATS = ROW_FLOATS + IDENTITY_COLUMNS
LAUNCH_TIMEOUT_S = 900


def free_port() -> int:
    """A TCP port nobody listens on right now (for the rendezvous on 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def launch(ranks: int, k: int, warmup: int, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run the worker under ``torch.distributed.run`` with ``ranks`` processes; rank 0's JSON.
    ``extra``: more worker arguments (``--rounds``, ...)."""
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
            *extra,
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
    """A table like the one rank 0 gathers (ROW_FLOATS wide): rank r slowest by r ms, every
    metric present."""
    rows = []
    for rank in range(world):
        row = [10.0, 95.0 + rank]
        row += [10.0 * (i + 1) + 0.5 * rank for i in range(len(REDUCED_METRICS))]
        row.append(1000.0)  # elapsed_ms: one second per window on every rank
        row += [20.0 + rank] * (ROW_FLOATS - len(row))  # the host-wide system figures
        assert len(row) == ROW_FLOATS and row[ELAPSED_COLUMN] == 1000.0
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
        filled = torch.tensor(table, dtype=torch.float64)
        node_of = [0] * world  # one node: what a single-node job's reducer passes

        def bookkeeping(filled: torch.Tensor = filled, node_of: list[int] = node_of) -> None:
            # what CrossRankReducer.__call__ does on rank 0 besides the gather itself: one
            # (world, row) buffer, a view of each of its rows for gather, one tolist()
            buffer = torch.empty_like(filled)
            _rows_for_gather = list(buffer.unbind(0))
            summarise_ranks(filled.tolist(), node_of)

        results.append(
            {
                "rows": world,
                "summarise_us": _median_us(lambda t=table: summarise_ranks(t), repeat),
                "rank0_local_us": _median_us(bookkeeping, repeat),
                "bytes": world * ROW_FLOATS * 8,
            }
        )
    return results


def _same(values: Sequence[Any]) -> str:
    """One value when every rank agrees, else ``min-max`` (a difference to look at)."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return f"{distinct[0]:g}" if isinstance(distinct[0], float) else f"{distinct[0]:,}"
    return f"{distinct[0]:g}-{distinct[-1]:g} (ranks differ)"


def counted_rows(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """What trainmon called per window at each N, from every rank's counts."""
    lines: list[tuple[str, ...]] = []
    for r in results:
        t = r["training"]
        ranks = t["per_rank"]
        ops = sorted({op for rank in ranks for op in rank["ops"]})
        later = sorted({b for rank in ranks for b in rank["later_window_bytes"]})
        journal = t["journal"]
        lines.append(
            (
                str(r["world_size"]),
                f"{t['windows']}",
                _same([rank["collectives_per_window"] for rank in ranks])
                + (f" ({', '.join(ops)})" if ops else ""),
                _same([rank["first_window_bytes"] for rank in ranks]),
                "/".join(f"{b:,}" for b in later) or "0",
                f"{r['world_size'] * later[-1]:,}" if later else "0",
                _same([rank["training_collectives_per_step"] for rank in ranks]),
                f"{journal['with_cross_rank']} of {journal['windows']}",
            )
        )
    return lines


def cost_rows(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The training loop with and without trainmon at each N (medians; 95 % intervals)."""
    lines: list[tuple[str, ...]] = []
    for r in results:
        t = r["training"]
        wall, cpu, rate = (
            t["step_wall_us"],
            t["step_cpu_us_all_ranks"],
            t["job_steps_x_ranks_per_s"],
        )
        added, (low, high) = t["step_cpu_added_us"]
        change, interval = t["job_rate_change"]
        lines.append(
            (
                str(r["world_size"]),
                f"{wall['plain']['median_us']:,.0f} / {wall['trainmon']['median_us']:,.0f}",
                f"{cpu['plain']:,.0f} / {cpu['trainmon']:,.0f}",
                f"{added:+.0f} [{low:+.0f}, {high:+.0f}]",
                f"{rate['plain']:,.0f} / {rate['trainmon']:,.0f}",
                harness.percent_ci(change, interval),
            )
        )
    return lines


def print_report(
    results: list[dict[str, Any]], local: list[dict[str, float]], info: dict[str, Any]
) -> None:
    """The counted and measured tables, the direct rank-0 measurements and the extrapolation,
    in Markdown. ``info``: the machine at the start (its load then)."""
    print()
    print(harness.machine_line(info))
    print(
        f"load average at the end {harness.load_average()}; "
        f"torch {torch.__version__}, gloo on 127.0.0.1, OMP_NUM_THREADS=1; the row: "
        f"{ROW_FLOATS} float64 ({ROW_FLOATS * 8} B), the first window's {FIRST_ROW_FLOATS} "
        f"({FIRST_ROW_FLOATS * 8} B, with the node identity)."
    )
    warning = harness.busy_warning(info)
    if warning:
        print(warning)
    t0 = results[0]["training"]
    print()
    print(
        f"What trainmon called, counted on every rank (trainmon.initialize, "
        f"{t0['window_steps']} steps per window, {t0['engine_steps']} steps):"
    )
    print()
    harness.print_markdown_table(
        (
            "ranks",
            "windows",
            "trainmon collectives/window (each rank)",
            "bytes sent by a rank, first window",
            "bytes sent by a rank, later windows",
            "bytes rank 0 receives/window",
            "engine data-parallel all-reduces/step",
            "rank 0's journal: windows with cross-rank stats",
        ),
        counted_rows(results),
    )
    print()
    print(
        f"The training loop with and without trainmon, interleaved ({t0['rounds']} rounds of a "
        f"{t0['steps_per_block']}-step block each, order flipped every round; "
        f"tiny MLP, batch 4, SGD, one gradient all-reduce per step in both):"
    )
    print()
    harness.print_markdown_table(
        (
            "ranks",
            "step wall µs (rank 0) plain / trainmon",
            "training-thread CPU µs/step plain / trainmon",
            "trainmon adds, CPU µs/step [95% CI]",
            "job steps x ranks/s plain / trainmon",
            "job rate change [95% CI]",
        ),
        cost_rows(results),
    )
    timed = [r for r in results if "reducer" in r]
    if timed:
        print_reduction(timed)
    print()
    print("Rank 0's local share of a window, measured directly in one process (no collective):")
    print()
    harness.print_markdown_table(
        ("rows (ranks)", "summarise_ranks µs", "buffer + tolist + summarise µs", "bytes"),
        [
            (
                str(row["rows"]),
                f"{row['summarise_us']:,.1f}",
                f"{row['rank0_local_us']:,.1f}",
                f"{int(row['bytes']):,}",
            )
            for row in local
        ],
    )
    if timed:
        print_extrapolation(timed, local)


def print_reduction(results: list[dict[str, Any]]) -> None:
    """The reduction alone (the worker's part 1) at each N."""
    print()
    print(f"The reduction alone: K = {results[0]['k']} windows per N, each after a barrier:")
    print()
    lines: list[tuple[str, ...]] = []
    for r in results:
        red = r["reducer"]
        checks = r["checks"]
        ok = checks["slowest_rank_ok"] and checks["argmax_ok"] and checks["job_samples_ok"]
        lines.append(
            (
                str(r["world_size"]),
                f"{red['median_us']:,.0f} [{red['p10_us']:,.0f}-{red['p90_us']:,.0f}]",
                f"{r['gather']['median_us']:,.0f}",
                f"{r['summarise_ranks']['median_us']:.1f}",
                f"{r['pack_window']['median_us']:.1f}",
                f"{r['reducer_thread_cpu']['median_us']:.0f}",
                f"{r['reducer_process_cpu']['median_us']:.0f}",
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
            "result checked",
        ),
        lines,
    )


def print_extrapolation(results: list[dict[str, Any]], local: list[dict[str, float]]) -> None:
    """Least-squares lines through the measured N, and what they say at 1,024 ranks."""
    ns = [float(r["world_size"]) for r in results]
    summ_a, summ_b = fit_line(ns, [r["summarise_ranks"]["median_us"] for r in results])
    gath_a, gath_b = fit_line(ns, [r["gather"]["median_us"] for r in results])
    cpu_a, cpu_b = fit_line(ns, [r["reducer_thread_cpu"]["median_us"] for r in results])
    direct = next((row for row in local if row["rows"] == TARGET_RANKS), None)
    n = TARGET_RANKS
    print()
    print(f"Extrapolation to {n:,} ranks (least-squares lines through the measured N):")
    print()
    counts = sorted(
        {rank["collectives_per_window"] for r in results for rank in r["training"]["per_rank"]}
        - {0.0}
    )
    print(
        f"* bytes gathered on rank 0 per window: {n} x {ROW_FLOATS} x 8 = {n * ROW_FLOATS * 8:,} "
        f"B = {n * ROW_FLOATS * 8 / 1024:.0f} KiB (each rank sends {ROW_FLOATS * 8} B, whatever "
        f"N); collectives per window counted at N > 1: {', '.join(f'{c:g}' for c in counts)} "
        f"(one gather per window means 1), from the background thread, never on the training "
        f"stream."
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
    parser.add_argument("--k", type=int, default=200, help="timed windows per N (0: skip)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed windows first")
    parser.add_argument("--rounds", type=int, default=30, help="training rounds per N")
    parser.add_argument("--block-windows", type=int, default=2, help="windows per block")
    parser.add_argument("--cross-rank", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--breakdown", action="store_true", help="wall_clock_breakdown on")
    parser.add_argument("--local-sizes", type=int, nargs="+", default=[1, 8, 64, 256, TARGET_RANKS])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    extra = [
        f"--rounds={args.rounds}",
        f"--block-windows={args.block_windows}",
        f"--cross-rank={args.cross_rank}",
        *(["--breakdown"] if args.breakdown else []),
    ]
    info = harness.machine_info()
    results = []
    for ranks in args.ranks:
        print(f"launching {ranks} rank(s) ...", file=sys.stderr, flush=True)
        result = launch(ranks, args.k, args.warmup, extra)
        print(f"  done in {result['launch_seconds']:.1f} s", file=sys.stderr, flush=True)
        results.append(result)
    local = local_share(args.local_sizes, repeat=max(args.k, 50))
    print_report(results, local, info)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"machine": info, "distributed": results, "local": local},
                indent=2,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
