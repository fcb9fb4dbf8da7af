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

Page: ``--page [--scalars N] [--repeat R] [--appends A] [--append-steps S]`` writes a journal of
N scalars (default 1,000,000) and prints a table: the size of ``trainmon report``'s page, the
time headless Chromium takes to run its scripts (from navigation to every chart drawn, the
page's ``body[data-ready-ms]``; median of at least 3 loads; skipped without Chromium), and what
one poll of ``trainmon report --serve`` costs the server after S steps are appended (reading
the new lines, then ``data.json``), median of A polls.
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


def work_page(data: Path, out: Path, appends: int, append_steps: int) -> dict[str, Any]:
    """``trainmon report`` of the journal (seconds, page bytes), then ``--serve``'s work per
    poll while the run grows: ``append_steps`` steps appended ``appends`` times, each followed
    by what a poll costs the server (read the new lines, then data.json: the points since the
    page's version, the overview and tables rendered again), timed apart from the writing."""
    import orjson

    from trainmon.report import load_run, write_report
    from trainmon.report.live import LiveRuns

    journal = data / "journal" / "ds_job"
    began = time.perf_counter()
    run = load_run(journal)
    page = write_report([run], out / "page.html")
    seconds = time.perf_counter() - began
    scalars = run.scalar_count
    del run
    began = time.perf_counter()
    live = LiveRuns([str(journal)], [None])
    start_s = time.perf_counter() - began
    began = time.perf_counter()
    full = orjson.dumps(live.updates(0, full=True))
    full_s = time.perf_counter() - began
    rng = random.Random(1)
    path = journal / "metrics.jsonl"
    last = live.runs[0].series[METRICS[0]].steps[-1]
    version = live.version
    polls: list[dict[str, Any]] = []
    for _ in range(appends):
        lines = journal_records(last + 1, append_steps, time.time(), rng)
        last += append_steps
        with open(path, "ab") as f:
            f.write(b"\n".join(lines) + b"\n")
        began = time.perf_counter()
        assert live.refresh()
        refreshed = time.perf_counter()
        body = orjson.dumps(live.updates(version))
        done = time.perf_counter()
        update = orjson.loads(body)
        assert update["mode"] == "append", update.get("mode")
        version = update["version"]
        polls.append(
            {"read_s": refreshed - began, "update_s": done - refreshed, "bytes": len(body)}
        )
    return {
        "seconds": seconds,
        "scalars": scalars,
        "means": {},
        "page": str(page),
        "page_bytes": page.stat().st_size,
        "serve_start_s": start_s,
        "full_update_s": full_s,
        "full_update_bytes": len(full),
        "polls": polls,
    }


def worker_main(name: str, data: Path, out: Path) -> None:
    if name.startswith("trainmon-page-"):  # trainmon-page-<appends>x<steps>
        appends, steps = map(int, name.removeprefix("trainmon-page-").split("x"))
        result = work_page(data, out, appends, steps)
    elif name == "trainmon-goodput-journal":
        result = work_goodput(data)
    elif name == "event_accumulator":
        result = work_event_accumulator(data, out)
    else:
        _, command, source = name.split("-")  # trainmon-summary-tb
        result = work_trainmon(data, out, source, command)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    harness.emit_result(result)


def journal_records(first: int, steps: int, start: float, rng: random.Random) -> list[bytes]:
    """The lines a Monitor writes for steps ``first`` .. ``first + steps - 1`` (ten metrics per
    step, a window record every 50 steps; JsonlWriter's record shapes, written with orjson)."""
    import orjson

    lines = []
    window: dict[str, list[float]] = {}
    for step in range(first, first + steps):
        values = {m: value(i, step, rng) for i, m in enumerate(METRICS)}
        record = {"v": 1, "kind": "scalars", "step": step, "time": start + step * 0.01}
        record["values"] = values
        lines.append(orjson.dumps(record))
        for m, v in values.items():
            window.setdefault(m, []).append(v)
        if step % 50 == 0:
            stats = {
                m: {"count": len(vs), "mean": statistics.fmean(vs), "min": min(vs),
                    "max": max(vs), "last": vs[-1]}
                for m, vs in window.items()
            }  # fmt: skip
            lines.append(
                orjson.dumps(
                    {"v": 1, "kind": "window", "first_step": step - 49, "last_step": step,
                     "start_time": start + (step - 49) * 0.01,
                     "end_time": start + step * 0.01, "stats": stats}
                )
            )  # fmt: skip
            window = {}
    return lines


def write_journal(path: Path, megabytes: float, scalars: int | None = None) -> int:
    """A journal of about ``megabytes`` MB (or of ``scalars`` values, a multiple of ten) as a
    Monitor writes it; returns the number of scalars."""
    import orjson

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    limit = megabytes * 1e6
    steps_wanted = scalars // len(METRICS) if scalars is not None else None
    written = step = 0
    start = time.time()
    with open(path, "wb") as f:
        meta = {"v": 1, "kind": "meta", "time": start, "job": "ds_job", "rank": 0}
        f.write(orjson.dumps(meta) + b"\n")
        while written < limit and (steps_wanted is None or step < steps_wanted):
            count = 1000 if steps_wanted is None else min(1000, steps_wanted - step)
            data = b"\n".join(journal_records(step + 1, count, start, rng)) + b"\n"
            step += count
            f.write(data)
            written += len(data)
    return step * len(METRICS)


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


# ---- the page: size, load time in Chromium, --serve's incremental update ----------------------

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def chromium_load(page: Path, profile: Path) -> dict[str, Any]:
    """Open ``page`` in headless Chromium (offline, a fresh profile) and read what its scripts
    say when done: ``data-ready-ms`` (navigation to every chart drawn, by the page's clock),
    the charts drawn and errors; ``process_s``: Chromium's whole run, start-up included."""
    import re

    binary = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    if binary is None:
        return {"error": "headless Chromium not installed"}
    command = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=60000", "--window-size=1400,1800", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    process_s = time.perf_counter() - began
    shutil.rmtree(profile, ignore_errors=True)
    body = re.search(r"<body\b[^>]*>", done.stdout)
    if done.returncode != 0 or body is None:
        return {"error": f"chromium exited {done.returncode}: {done.stderr[-300:]}"}
    attributes = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(0)))
    if attributes.get("data-ready") != "1":
        return {"error": "the page's scripts did not finish"}
    return {
        "ready_ms": float(attributes["data-ready-ms"]),
        "charts": int(attributes.get("data-charts", "0")),
        "errors": int(attributes.get("data-errors", "0")),
        "process_s": process_s,
    }


def page_main(scalars: int, repeat: int, base: Path, appends: int, steps: int) -> int:
    """The report page of a journal of ``scalars`` values: its size, the time Chromium takes
    to run its scripts (median of ``repeat`` loads), and ``--serve``'s work per poll."""
    journal = base / "journal" / "ds_job" / "metrics.jsonl"
    began = time.perf_counter()
    scalars = write_journal(journal, math.inf, scalars=scalars)
    print(
        f"journal {journal.stat().st_size / 1e6:.0f} MB, {scalars:,} scalars "
        f"({scalars // len(METRICS):,} steps x {len(METRICS)} metrics), written in "
        f"{time.perf_counter() - began:.0f} s; python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    args = ["--worker", f"trainmon-page-{appends}x{steps}", "--data", str(base), "--out", str(base)]
    result = harness.run_worker(__file__, args)
    if "error" in result:
        print(f"page worker failed: {result['error']}")
        return 1
    assert result["scalars"] == scalars, (result["scalars"], scalars)
    loads = [chromium_load(Path(result["page"]), base / f"profile-{i}") for i in range(repeat)]
    rows = [
        ("HTML page (trainmon report)", f"{result['page_bytes'] / 1e6:.2f} MB", ""),
        ("trainmon report: read the run + write the page", f"{result['seconds']:.2f} s", ""),
    ]
    failed = next((r["error"] for r in loads if "error" in r), None)
    if failed is None:
        ready = statistics.median(r["ready_ms"] for r in loads)
        process = statistics.median(r["process_s"] for r in loads)
        spread = f"{min(r['ready_ms'] for r in loads):.0f}-{max(r['ready_ms'] for r in loads):.0f}"
        drawn = loads[0]["charts"]
        errors = sum(r["errors"] for r in loads)
        rows += [
            ("Chromium: page load to every chart drawn", f"{ready:.0f} ms",
             f"median of {repeat} ({spread} ms); {drawn} charts, {errors} errors"),
            ("Chromium: whole headless run (start-up included)", f"{process:.2f} s", ""),
        ]  # fmt: skip
    else:
        rows.append(("Chromium: page load", "skipped", failed))
    polls = result["polls"]
    read = statistics.median(p["read_s"] for p in polls) * 1e3
    update = statistics.median(p["update_s"] for p in polls) * 1e3
    size = statistics.median(p["bytes"] for p in polls) / 1e3
    each = f"{steps} steps ({steps * len(METRICS):,} values) appended"
    rows += [
        ("--serve: start (read the journal)", f"{result['serve_start_s']:.2f} s", ""),
        ("--serve: full data.json (every chart)", f"{result['full_update_s'] * 1e3:.0f} ms",
         f"{result['full_update_bytes'] / 1e6:.2f} MB"),
        ("--serve poll: read the appended lines", f"{read:.1f} ms",
         f"median of {len(polls)} polls, {each}"),
        ("--serve poll: data.json since the page's version", f"{update:.0f} ms",
         f"{size:.0f} kB (new points, overview and tables)"),
        ("--serve poll: total", f"{read + update:.0f} ms", ""),
    ]  # fmt: skip
    print()
    harness.print_columns([("what", -50), ("value", 10), ("", -1)], rows, rule=True)
    print(f"(worker peak RSS {result['peak_rss_mb']:.0f} MB)")
    return 0 if failed is None or "not installed" in failed else 1


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
    parser.add_argument(
        "--page",
        action="store_true",
        help="the report page of a run of --scalars values: size, load time in headless "
        "Chromium, --serve's work per poll",
    )
    parser.add_argument(
        "--appends", type=int, default=10, help="page mode: polls timed (default 10)"
    )
    parser.add_argument(
        "--append-steps", type=int, default=100, help="page mode: steps appended per poll"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.data, args.out)
        return 0
    base = args.keep or Path(tempfile.mkdtemp(prefix="trainmon-bench-report-"))
    base.mkdir(parents=True, exist_ok=True)
    if args.page:
        try:
            return page_main(
                args.scalars, max(args.repeat, 3), base, args.appends, args.append_steps
            )
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
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
