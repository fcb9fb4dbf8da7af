"""Reading a run back: ``trainmon summary`` / ``trainmon report`` vs. TensorBoard's reader.

One command generates a run of N scalars (default 1,000,000: 10 metrics x 100,000 steps) in
two forms and times, each in its own subprocess, side by side:

* ``EventAccumulator``: TensorBoard's own reader (``size_guidance={"scalars": 0}``,
  ``Reload()`` then ``Scalars(tag)`` for every tag) on a TensorBoard folder laid out as
  DeepSpeed and ``torch.utils.tensorboard.SummaryWriter.add_scalar`` write it (one Event per
  scalar, DeepSpeed's ``Train/Samples/*`` tags);
* ``trainmon summary`` and ``trainmon report`` (load + statistics + table / HTML file) on the
  same TensorBoard folder, and on trainmon's JSONL journal of the same values.

Per contender: seconds, microseconds per scalar, speed-up per scalar over EventAccumulator,
peak RSS of the worker. Times exclude interpreter start-up and imports (the end-to-end
command line is timed too and printed apart). Each worker checks it read N scalars, and the
trainmon workers' per-metric means are checked against EventAccumulator's.

Run: ``.venv/bin/python benchmarks/bench_report.py [--scalars N] [--repeat R] [--json out]``

Memory: ``--journal-mb M [--src OTHER_SRC]`` writes a journal of about M MB (the same ten
metrics per step and a window every 50 steps) and runs ``trainmon summary``, ``trainmon
report`` and ``trainmon goodput`` on it, each in its own process, printing seconds, peak RSS
and peak RSS / file size; ``--src`` runs them on another checkout's ``src`` (e.g. the code
before a change) for a side by side comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

METRICS = (
    "Train/Samples/train_loss",
    "Train/Samples/lr",
    "Train/Samples/loss_scale",
    "Train/Samples/elapsed_time_ms_forward",
    "Train/Samples/elapsed_time_ms_backward",
    "Train/Samples/elapsed_time_ms_backward_inner",
    "Train/Samples/elapsed_time_ms_backward_allreduce",
    "Train/Samples/elapsed_time_ms_step",
    "Train/Samples/grad_norm",
    "Train/Samples/samples_per_sec",
)
BATCH = 32
TARGET_SPEEDUP = 10.0


def value(metric_index: int, step: int, rng: random.Random) -> float:
    """A plausible value: a decaying loss, a constant lr, noisy times."""
    if metric_index == 0:
        return 4.0 * math.exp(-step / 20_000) + 0.05 * rng.random()
    if metric_index == 1:
        return 1e-4
    if metric_index == 2:
        return 65536.0
    return (metric_index + 1) * (1.0 + rng.random())


def generate(folder: Path, scalars: int) -> dict[str, Any]:
    """The same values as a DeepSpeed-style event file (x = samples) and as a trainmon journal
    (x = steps, with a window record every 50 steps, as a Monitor writes it)."""
    from trainmon.core.aggregate import WindowAggregator
    from trainmon.core.events import StepScalars
    from trainmon.writers.jsonl import JsonlWriter
    from trainmon.writers.tensorboard import TensorBoardWriter

    steps = scalars // len(METRICS)
    rng = random.Random(0)
    tb = TensorBoardWriter(folder / "tensorboard" / "ds_job")
    journal = JsonlWriter(folder / "journal" / "ds_job", "ds_job")
    windows = WindowAggregator(50)
    start = time.time()
    per_step: list[StepScalars] = []
    per_scalar: list[StepScalars] = []
    for step in range(1, steps + 1):
        samples = step * BATCH
        wall = start + step * 0.01
        values = {m: value(i, step, rng) for i, m in enumerate(METRICS)}
        per_step.append(StepScalars(step, wall, values))  # trainmon logs optimizer steps
        # One Event per scalar, exactly as SummaryWriter.add_scalar / DeepSpeed write them.
        per_scalar.extend(StepScalars(samples, wall, {m: v}) for m, v in values.items())
        if len(per_step) >= 2000 or step == steps:
            tb.write(per_scalar)
            journal.write(per_step)
            journal.write_windows(windows.add(per_step))
            per_step, per_scalar = [], []
    last = windows.close()
    if last is not None:
        journal.write_windows([last])
    tb.close()
    journal.close()
    return {
        "steps": steps,
        "scalars": steps * len(METRICS),
        "tensorboard_bytes": sum(p.stat().st_size for p in (folder / "tensorboard").rglob("*")),
        "journal_bytes": (folder / "journal" / "ds_job" / "metrics.jsonl").stat().st_size,
    }


# ---- workers (each runs in its own process) -------------------------------------------------


def work_event_accumulator(data: Path, out: Path) -> dict[str, Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    began = time.perf_counter()
    acc = EventAccumulator(str(data / "tensorboard" / "ds_job"), size_guidance={"scalars": 0})
    acc.Reload()
    means = {}
    count = 0
    for tag in acc.Tags()["scalars"]:
        values = [e.value for e in acc.Scalars(tag)]
        count += len(values)
        means[tag] = statistics.fmean(values)
    return {"seconds": time.perf_counter() - began, "scalars": count, "means": means}


def work_trainmon(data: Path, out: Path, source: str, command: str) -> dict[str, Any]:
    from trainmon.report import load_run, summarize, write_report
    from trainmon.report.text import render_summary

    path = data / ("tensorboard" if source == "tb" else "journal") / "ds_job"
    began = time.perf_counter()
    run = load_run(path, clock=command != "summary")  # as the commands read it
    summary = summarize(run)
    size = None
    if command == "summary":
        text = render_summary(summary)
        assert "Train/Samples/train_loss" in text
    else:
        report = write_report([run], out / f"report-{source}.html")
        size = report.stat().st_size
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "scalars": run.scalar_count,
        "means": {m.name: m.mean for m in summary.metrics},
        "report_bytes": size,
    }


def work_goodput(data: Path) -> dict[str, Any]:
    """``trainmon goodput RUN --json`` as a user runs it (the CLI's entry point, in-process)."""
    import contextlib
    import io

    from trainmon.cli import main as cli

    began = time.perf_counter()
    out = io.TextIOWrapper(io.BytesIO())  # --json writes bytes to stdout's buffer
    with contextlib.redirect_stdout(out):
        assert cli(["goodput", str(data / "journal" / "ds_job"), "--json"]) == 0
    seconds = time.perf_counter() - began
    out.flush()
    steps = sum(a["steps"] for a in json.loads(out.buffer.getvalue())["attempts"])
    return {"seconds": seconds, "scalars": steps * len(METRICS), "means": {}}


def worker_main(name: str, data: Path, out: Path) -> None:
    if name == "trainmon-goodput-journal":
        result = work_goodput(data)
    elif name == "event_accumulator":
        result = work_event_accumulator(data, out)
    else:
        _, command, source = name.split("-")  # trainmon-summary-tb
        result = work_trainmon(data, out, source, command)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    harness.emit_result(result)


def write_journal(path: Path, megabytes: float) -> int:
    """A journal of about ``megabytes`` MB as a Monitor writes it (JsonlWriter's record shapes,
    written with orjson directly for speed); returns the number of scalars."""
    import orjson

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    limit = megabytes * 1e6
    written = scalars = 0
    start = time.time()
    with open(path, "wb") as f:
        meta = {"v": 1, "kind": "meta", "time": start, "job": "ds_job", "rank": 0}
        f.write(orjson.dumps(meta) + b"\n")
        step = 0
        window: dict[str, list[float]] = {}
        while written < limit:
            chunk = []
            for _ in range(1000):
                step += 1
                values = {m: value(i, step, rng) for i, m in enumerate(METRICS)}
                scalars += len(values)
                record = {"v": 1, "kind": "scalars", "step": step, "time": start + step * 0.01}
                record["values"] = values
                chunk.append(orjson.dumps(record))
                for m, v in values.items():
                    window.setdefault(m, []).append(v)
                if step % 50 == 0:
                    stats = {
                        m: {"count": len(vs), "mean": statistics.fmean(vs), "min": min(vs),
                            "max": max(vs), "last": vs[-1]}
                        for m, vs in window.items()
                    }  # fmt: skip
                    chunk.append(
                        orjson.dumps(
                            {"v": 1, "kind": "window", "first_step": step - 49, "last_step": step,
                             "start_time": start + (step - 49) * 0.01,
                             "end_time": start + step * 0.01, "stats": stats}
                        )
                    )  # fmt: skip
                    window = {}
            data = b"\n".join(chunk) + b"\n"
            f.write(data)
            written += len(data)
    return scalars


def memory_main(megabytes: float, src: Path | None, base: Path) -> int:
    """Seconds and peak RSS of summary and report on a journal of ``megabytes`` MB."""
    journal = base / "journal" / "ds_job" / "metrics.jsonl"
    began = time.perf_counter()
    scalars = write_journal(journal, megabytes)
    size = journal.stat().st_size
    print(
        f"journal {size / 1e6:.0f} MB, {scalars:,} scalars, written in "
        f"{time.perf_counter() - began:.0f} s; python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    env = {"PYTHONPATH": str(src)} if src is not None else None
    print(f"code: {src or 'this checkout'}")
    for command in ("summary", "report", "goodput"):
        args = ["--worker", f"trainmon-{command}-journal", "--data", str(base), "--out", str(base)]
        result = harness.run_worker(__file__, args, env)
        if "error" in result:
            print(f"  {command}: failed: {result['error']}")
            continue
        assert result["scalars"] == scalars, (result["scalars"], scalars)
        rss = result["peak_rss_mb"]
        print(
            f"  trainmon {command:<8} {result['seconds']:7.1f} s  "
            f"{result['seconds'] / scalars * 1e6:5.2f} us/scalar  peak RSS {rss:6.0f} MB  "
            f"= {rss * 1048576 / size:.2f} x the journal"
        )
    return 0


# ---- the driver -----------------------------------------------------------------------------

CONTENDERS = (
    ("event_accumulator", "EventAccumulator: load every scalar (TensorBoard folder)"),
    ("trainmon-summary-tb", "trainmon summary (same TensorBoard folder)"),
    ("trainmon-report-tb", "trainmon report (same TensorBoard folder)"),
    ("trainmon-summary-journal", "trainmon summary (trainmon JSONL journal)"),
    ("trainmon-report-journal", "trainmon report (trainmon JSONL journal)"),
)


def run_worker(name: str, data: Path, out: Path) -> dict[str, Any]:
    result = harness.run_worker(
        __file__, ["--worker", name, "--data", str(data), "--out", str(out)]
    )
    if "error" in result:
        raise RuntimeError(f"worker {name} failed: {result['error']}")
    result.pop("other_load_pct", None)
    return result


def cli_seconds(command: str, path: Path, out: Path) -> float:
    """End to end, as a user runs it: interpreter start, imports, work, exit."""
    args = [sys.executable, "-m", "trainmon", command, str(path)]
    if command == "report":
        args += ["-o", str(out / "cli-report.html")]
    began = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scalars", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender; median kept")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="generate into this folder and keep it")
    parser.add_argument("--journal-mb", type=float, help="memory mode: journal of this size")
    parser.add_argument("--src", type=Path, help="memory mode: run this src tree instead")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.data, args.out)
        return 0
    base = args.keep or Path(tempfile.mkdtemp(prefix="trainmon-bench-report-"))
    base.mkdir(parents=True, exist_ok=True)
    if args.journal_mb:
        try:
            return memory_main(args.journal_mb, args.src, base)
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
    data, out = base / "data", base / "out"
    out.mkdir(exist_ok=True)
    try:
        began = time.perf_counter()
        facts = generate(data, args.scalars)
        print(
            f"generated {facts['scalars']:,} scalars ({facts['steps']:,} steps x "
            f"{len(METRICS)} metrics) in {time.perf_counter() - began:.1f} s: event file "
            f"{facts['tensorboard_bytes'] / 1e6:.1f} MB, "
            f"journal {facts['journal_bytes'] / 1e6:.1f} MB"
        )
        info = harness.machine_info(())
        print(f"python {info['python']}, {info['cpus']} CPUs, {info['platform']}")
        results: dict[str, dict[str, Any]] = {}
        for name, _ in CONTENDERS:
            runs = [run_worker(name, data, out) for _ in range(args.repeat)]
            runs.sort(key=lambda r: r["seconds"])
            results[name] = runs[len(runs) // 2]
            assert results[name]["scalars"] == facts["scalars"], (name, results[name]["scalars"])
        reference = results["event_accumulator"]
        for name, result in results.items():
            for tag, mean in reference["means"].items():
                assert math.isclose(result["means"][tag], mean, rel_tol=1e-6), (name, tag)
        base_us = reference["seconds"] / facts["scalars"] * 1e6
        print()
        passed = True
        lines = []
        for name, label in CONTENDERS:
            r = results[name]
            us = r["seconds"] / facts["scalars"] * 1e6
            r["us_per_scalar"] = us
            r["speedup"] = base_us / us
            if name != "event_accumulator":
                passed = passed and r["speedup"] >= TARGET_SPEEDUP
            extra = f"  (HTML {r['report_bytes'] / 1e6:.2f} MB)" if r.get("report_bytes") else ""
            lines.append(
                (
                    label,
                    f"{r['seconds']:.2f}",
                    f"{us:.2f}",
                    f"{r['speedup']:.1f}x",
                    f"{r['peak_rss_mb']:>7.0f} MB{extra}",
                )
            )
        columns = [("contender", -58), ("seconds", 8), ("us/scalar", 10), ("speed-up", 9)]
        harness.print_columns([*columns, ("peak RSS", 9)], lines, rule=True)
        print()
        journal = data / "journal" / "ds_job"
        end_to_end = {
            "trainmon summary (journal)": cli_seconds("summary", journal, out),
            "trainmon report (journal)": cli_seconds("report", journal, out),
            "trainmon summary (tensorboard)": cli_seconds(
                "summary", data / "tensorboard" / "ds_job", out
            ),
        }
        for label, seconds in end_to_end.items():
            print(f"end to end, `{label}` from a shell: {seconds:.2f} s")
        verdict = "PASS" if passed else "FAIL"
        print(
            f"\ntarget: every trainmon contender >= {TARGET_SPEEDUP:.0f}x faster per scalar "
            f"than EventAccumulator: {verdict}"
        )
        if args.json:
            for r in results.values():
                r.pop("means", None)
            args.json.write_text(
                json.dumps(
                    {"facts": facts, "results": results, "end_to_end_s": end_to_end}, indent=2
                )
            )
        return 0 if passed else 1
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
