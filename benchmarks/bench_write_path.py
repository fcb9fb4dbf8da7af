"""Cost per logged scalar on the training thread: trainmon vs. the usual ways of logging.

Contenders, measured side by side by this one command, each in a fresh subprocess once per
round (rounds interleave the contenders, so load from other work hits them alike):
``deque.append`` (the floor), ``trainmon.Monitor.write_events`` (several writer sets, plain
floats and 0-d tensors, flat out and paced), ``torch.utils.tensorboard.SummaryWriter
.add_scalar``, ``tensorboardX.SummaryWriter.add_scalar``, ``wandb.log`` (offline) and a
DeepSpeed-style synchronous TensorBoard + CSV monitor (``write_path/contenders.py``). For each:
calling-thread CPU and wall time per scalar, and background CPU per scalar (process CPU plus
child processes, from the first call until the contender is closed, minus the calling
thread's CPU). Then trainmon and SummaryWriter back to back in one process (a paired ratio),
and the team's targets.

Unless ``--no-extras`` it also runs, each in its own fresh process, the tensor check
(``bench_write_tensors.py``) and the breakdown of the hot path, the background stages and the
idle cost (``bench_write_breakdown.py``); ``--memory`` is the RSS series instead
(``bench_write_memory.py``). Each of those runs alone too.

Run: ``.venv/bin/python benchmarks/bench_write_path.py [--quick] [--json out.json]``
     ``.venv/bin/python benchmarks/bench_write_path.py --memory``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import bench_write_breakdown
import bench_write_memory
import bench_write_tensors
import harness
from write_path.contenders import (
    CONTENDERS,
    REFERENCE,
    bench_torch_summary_writer,
    trainmon_contender,
    work_contender,
)
from write_path.report import (
    Row,
    add_ratios,
    check_targets,
    print_paired,
    print_table,
    print_targets,
    summarize,
)
from write_path.workload import INFO_MODULES, PER_STEP, Sample, Unavailable


def work_paired(steps: int, rounds: int, folder: Path) -> dict[str, Any]:
    """trainmon (TB+JSONL) and torch's SummaryWriter back to back in one process, ``rounds``
    times, alternating which goes first: a ratio that load changes on the machine hit equally."""
    trainmon_run = trainmon_contender(("tensorboard", "jsonl"))
    pairs: list[dict[str, float]] = []
    try:
        trainmon_run(max(1, steps // 10), folder / "warm-t")
        bench_torch_summary_writer(max(1, steps // 10), folder / "warm-s")
        got: dict[str, Sample] = {}

        def one(which: str, i: int, _recorded: bool) -> None:
            run = trainmon_run if which == "t" else bench_torch_summary_writer
            got[which] = run(steps, folder / f"{which}{i}")

        def pair(_done: int, _total: int) -> None:
            t, sw = got["t"], got["s"]
            pairs.append(
                {
                    "trainmon_call_us": t.call_cpu_ns / 1e3 / t.scalars,
                    "summarywriter_call_us": sw.call_cpu_ns / 1e3 / sw.scalars,
                    "ratio": (sw.call_cpu_ns / sw.scalars) / (t.call_cpu_ns / t.scalars),
                }
            )

        harness.interleaved_rounds(("t", "s"), rounds, one, order="alternate", progress=pair)
    except Unavailable as exc:
        return {"unavailable": str(exc)}
    return {
        "scalars": steps * PER_STEP,
        "pairs": pairs,
        "median_ratio": statistics.median(p["ratio"] for p in pairs),
    }


def run_rounds(args: argparse.Namespace, keys: list[str], base: Path) -> dict[str, Row]:
    """Every contender once per round, each time in a fresh process (redone, up to
    ``--retries`` times, while other processes use more than ``--max-other-load`` % of the
    CPUs; the quietest attempt is kept). A contender found unavailable is not run again."""
    results: dict[str, dict[str, Any]] = {key: {"samples": []} for key in keys}
    loads: dict[str, list[float]] = {key: [] for key in keys}
    env = {"BENCH_QUEUE_SIZE": str(args.queue_size), "BENCH_PACE_MS": str(args.pace_ms)}

    def one(key: str, round_no: int, _recorded: bool) -> None:
        contender = CONTENDERS[key]
        if "samples" not in results[key]:
            return  # unavailable: said so once
        scalars = args.slow_scalars if contender.slow else args.scalars
        steps = max(1, scalars // PER_STEP)
        print(
            f"  round {round_no + 1}/{args.repeats}: {contender.label} ...",
            file=sys.stderr,
            flush=True,
        )
        result = harness.run_worker_quietly(
            __file__,
            [
                "--worker",
                key,
                "--steps",
                str(steps),
                "--repeats",
                "1",
                "--folder",
                str(base / f"{key}-{round_no}"),
            ],
            env,
            retries=args.retries,
            max_other_load_pct=args.max_other_load,
            measured=lambda answer: "samples" in answer,
        )
        if "samples" in result:
            results[key]["samples"].extend(result["samples"])
            loads[key].append(result["other_load_pct"])
        else:
            results[key] = result

    harness.interleaved_rounds(keys, args.repeats, one, order="fixed")
    rows: dict[str, Row] = {}
    for key in keys:
        if loads[key]:
            results[key]["other_load_pct"] = statistics.median(loads[key])
        rows[key] = summarize(key, results[key])
    add_ratios(rows)
    return rows


def main_benchmark(args: argparse.Namespace) -> int:
    keys = list(CONTENDERS) if not args.only else [k.strip() for k in args.only.split(",")]
    unknown = [k for k in keys if k not in CONTENDERS]
    if unknown:
        print(f"unknown contender(s) {unknown}; choose from {list(CONTENDERS)}", file=sys.stderr)
        return 2
    if REFERENCE not in keys:
        keys.insert(0, REFERENCE)
    base = Path(tempfile.mkdtemp(prefix="bench_write_path_", dir=args.tmp))
    info = harness.machine_info(INFO_MODULES)
    print("# trainmon write-path benchmark")
    print(harness.machine_line(info))
    print(
        f"scalars: {args.scalars:,} (fast), {args.slow_scalars:,} (slow); repeats: "
        f"{args.repeats}; {PER_STEP} scalars per step; paced rows sleep {args.pace_ms} ms "
        f"per step\n"
    )
    try:
        rows = run_rounds(args, keys, base)
        ordered = [rows[k] for k in CONTENDERS if k in rows]
        print_table(ordered)

        tensor = breakdown = paired = None
        if not args.no_extras:
            print("  running tensor check ...", file=sys.stderr, flush=True)
            tensor_steps = max(10, args.scalars // PER_STEP // 10)
            tensor = bench_write_tensors.run(tensor_steps, base / "tensor_check")
            bench_write_tensors.print_result(tensor, rows.get("trainmon_tensors"))
            print("  running hot-path breakdown ...", file=sys.stderr, flush=True)
            breakdown_steps = max(100, args.scalars // PER_STEP)
            breakdown = bench_write_breakdown.run(breakdown_steps, args.repeats, base / "breakdown")
            bench_write_breakdown.print_result(breakdown)
            if "torch_sw" in keys:
                print("  running paired ratio ...", file=sys.stderr, flush=True)
                paired = harness.run_worker(
                    __file__,
                    [
                        "--worker",
                        "paired",
                        "--steps",
                        str(max(1, args.slow_scalars // PER_STEP)),
                        "--repeats",
                        str(args.repeats),
                        "--folder",
                        str(base / "paired"),
                    ],
                )
                print_paired(paired)

        load = os.getloadavg()[0]
        info["loadavg_1m_at_end"] = round(load, 2)
        print(f"\n1-minute load average at the end: {load:.2f}")
        if warning := harness.busy_warning(info):
            print(warning)
        targets = check_targets(rows, paired)
        print_targets(targets, rows)
        if args.json:
            payload = {
                "machine": info,
                "settings": {
                    "scalars": args.scalars,
                    "slow_scalars": args.slow_scalars,
                    "repeats": args.repeats,
                    "per_step": PER_STEP,
                    "queue_size": args.queue_size,
                },
                "results": [asdict(r) for r in ordered],
                "targets": targets,
                "tensor_check": tensor,
                "breakdown": breakdown,
                "paired": paired,
            }
            Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
            print(f"\nwrote {args.json}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--scalars",
        type=int,
        default=200_000,
        help="scalars per repeat for the fast contenders (default 200000)",
    )
    parser.add_argument(
        "--slow-scalars",
        type=int,
        default=40_000,
        help="scalars per repeat for the synchronous / per-call-heavy ones "
        "(SummaryWriter, tensorboardX, wandb, DeepSpeed-style; default 40000)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="rounds; each runs every contender once in a fresh process (median reported)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 16000/1600 scalars, 2 rounds, no redos"
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated contenders, of: {','.join(CONTENDERS)}"
    )
    parser.add_argument("--queue-size", type=int, default=200_000, help="trainmon.queue_size")
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=20.0,
        help="redo a measurement when other processes used more than this %% of the CPUs "
        "meanwhile (default 20)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=3,
        help="redos per measurement on a busy machine; the quietest attempt is kept (default 3)",
    )
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=1.0,
        help="sleep per step in the 'paced' trainmon rows (a stand-in for the training step)",
    )
    parser.add_argument(
        "--no-extras", action="store_true", help="skip the tensor check and the hot-path breakdown"
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="instead: RSS series while logging --memory-scalars scalars",
    )
    parser.add_argument("--memory-scalars", type=int, default=1_000_000)
    parser.add_argument("--json", default="", help="also write the results to this JSON file")
    parser.add_argument("--tmp", default=None, help="folder for the files the writers write")
    # internal: one measurement in a fresh process
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.scalars, args.slow_scalars, args.repeats, args.retries = 16_000, 1_600, 2, 0
        args.memory_scalars = min(args.memory_scalars, 200_000)
    return args


def main_worker(args: argparse.Namespace) -> int:
    # a fresh folder per worker: a redone measurement never appends to an attempt's files
    if args.folder:
        Path(args.folder).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="worker-", dir=args.folder or None))
    try:
        if args.worker in CONTENDERS:
            result = work_contender(args.worker, args.steps, args.repeats, folder)
        elif args.worker == "paired":
            result = work_paired(args.steps, args.repeats, folder)
        else:
            result = {"error": f"unknown worker {args.worker!r}"}
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    harness.emit_result(result)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return main_worker(args)
    if args.memory:
        return bench_write_memory.report(
            args.memory_scalars, 100_000, args.queue_size, args.json, args.tmp
        )
    return main_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
