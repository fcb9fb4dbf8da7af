"""Where trainmon's write path spends its time: the hot path, the background stages, idling.

Why: the side-by-side table (``bench_write_path.py``) says how much a scalar costs; this says
which piece costs it, so that a change can be aimed. In a fresh process, with no writers:

* the calling thread, per call of 8 scalars, each piece of ``write_events`` timed apart (thread
  CPU, the empty loop subtracted): the user's own list-building, ``monitor.step = s``,
  ``write_events`` with a list, a tuple or ``(name, value, step)`` triples, and inside it
  ``tuple(list)``, ``time.time()`` and ``Pipeline.put``;
* each background stage called directly on batches of 256 steps (no thread, no wake-ups, no GIL
  hand-offs): ``Pipeline.records_of``, ``Pipeline.run_stages`` without writers,
  ``WindowAggregator.add``, and the TensorBoard, JSONL (records and windows) and CSV writers;
* the idle cost: CPU per second of an open Monitor that logs nothing, next to a bare thread
  looping on ``Event.wait(0.05)``.

Run: ``.venv/bin/python benchmarks/bench_write_breakdown.py [--steps 25000] [--repeats 5]
[--json out.json]`` (``--quick``: 2,000 steps, 2 repeats). ``bench_write_path.py`` runs it too
(unless ``--no-extras``), with ``--steps`` = its ``--scalars`` / 8.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import harness
from write_path.workload import (
    INFO_MODULES,
    NAMES,
    PER_STEP,
    ROWS_MASK,
    float_rows,
    trainmon_config,
)


def work_breakdown(steps: int, repeats: int, folder: Path) -> dict[str, Any]:
    """Thread CPU per call of each piece of the hot path, measured separately (no writers)."""
    import trainmon

    monitor = trainmon.Monitor(
        {"console": {"enabled": False}, "trainmon": {"queue_size": 50_000_000}}, writers=[]
    )
    from trainmon.config import PipelineConfig
    from trainmon.core.aggregate import WindowAggregator
    from trainmon.core.pipeline import Pipeline as StandalonePipeline
    from trainmon.core.writer import WriterGroup

    # Pipeline.put alone, on a pipeline of its own (the monitor's is not reached into)
    pipeline = StandalonePipeline(
        WriterGroup([]), PipelineConfig(queue_size=50_000_000), WindowAggregator(10), None
    )
    rows = float_rows()
    n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
    events_list = [(n, 0.5) for n in NAMES]
    events_tuple = tuple(events_list)
    events_3 = tuple((n, 0.5, 7) for n in NAMES)
    entry = (time.time(), 0, events_tuple, False)
    write = monitor.write_events
    monitor.write_events(events_tuple)  # first call teaches the name cache

    def empty() -> None:
        for _ in range(steps):
            pass

    def fetch_row() -> None:
        for s in range(steps):
            _a, _b, _c, _d, _e, _f, _g, _h = rows[s & ROWS_MASK]

    def build_list() -> None:
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            _events = [(n0, a), (n1, b), (n2, c), (n3, d), (n4, e), (n5, f), (n6, g), (n7, h)]

    def full() -> None:
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            monitor.step = s
            write([(n0, a), (n1, b), (n2, c), (n3, d), (n4, e), (n5, f), (n6, g), (n7, h)])

    def set_step() -> None:
        for s in range(steps):
            monitor.step = s

    def write_list() -> None:
        for _ in range(steps):
            write(events_list)

    def write_tuple() -> None:
        for _ in range(steps):
            write(events_tuple)

    def write_tuple_3() -> None:
        for _ in range(steps):
            write(events_3)

    def wall_clock() -> None:
        now = time.time
        for _ in range(steps):
            now()

    def put_only() -> None:
        put = pipeline.put
        for _ in range(steps):
            put(entry, 8)

    def tuple_of_list() -> None:
        for _ in range(steps):
            tuple(events_list)

    pieces: dict[str, Callable[[], None]] = {
        "loop": empty,
        "user: fetch the step's 8 values": fetch_row,
        "user: build list of 8 (name, value) (incl. fetch)": build_list,
        "user: monitor.step = s": set_step,
        "write_events(list of 8), prebuilt list": write_list,
        "write_events(tuple of 8), prebuilt tuple": write_tuple,
        "write_events(tuple of 8 (name, value, step))": write_tuple_3,
        "  tuple(list of 8)": tuple_of_list,
        "  time.time()": wall_clock,
        "full step as in the table (fetch + step + build + write)": full,
    }
    pieces["  Pipeline.put(entry, 8)"] = put_only
    medians: dict[str, float] = {}
    for name, fn in pieces.items():
        runs = harness.time_calls(fn, repeats, warmup=1, before=gc.collect).thread_ns
        medians[name] = statistics.median(runs) / steps  # ns per call (8 scalars)
    monitor.close()
    pipeline.close()
    base = medians.pop("loop")
    per_call = {name: max(0.0, ns - base) for name, ns in medians.items()}
    tuple_call = per_call["write_events(tuple of 8), prebuilt tuple"]
    known = per_call["  time.time()"] + per_call.get("  Pipeline.put(entry, 8)", 0.0)
    per_call["  rest: call, per-item checks, entry tuple (by difference)"] = max(
        0.0, tuple_call - known
    )
    return {
        "steps": steps,
        "loop_overhead_ns_per_call": base,
        "ns_per_call": per_call,
        "background_ns_per_scalar": background_pieces(repeats, folder),
        "idle": idle_cost(),
    }


def background_pieces(repeats: int, folder: Path) -> dict[str, float]:
    """Thread CPU per scalar of each background stage, called directly on batches of 256 steps.

    No thread, no wake-ups, no GIL hand-offs: the marginal cost of the work itself.
    """
    from trainmon.core.entries import Entry
    from trainmon.core.events import StepScalars
    from trainmon.core.pipeline import Pipeline
    from trainmon.writers.csv import CsvWriter
    from trainmon.writers.jsonl import JsonlWriter
    from trainmon.writers.tensorboard import TensorBoardWriter

    batch_steps = 256
    rows = float_rows()
    now = time.time()
    step_rows = [tuple(zip(NAMES, rows[s & ROWS_MASK], strict=True)) for s in range(batch_steps)]
    entries: list[Entry] = [(now, s, row, False) for s, row in enumerate(step_rows)]
    records = [StepScalars(s, now, dict(row)) for s, row in enumerate(step_rows)]
    scalars = batch_steps * PER_STEP
    reps = 200
    out: dict[str, float] = {}

    def timed(fn: Callable[[], None]) -> float:
        fn()

        def batch() -> None:
            for _ in range(reps):
                fn()

        runs = harness.time_calls(batch, repeats, before=gc.collect).thread_ns
        return statistics.median(runs) / (reps * scalars)

    def piece(label: str, make: Callable[[], Callable[[], Any]]) -> None:
        """Time one stage; a stage this version of trainmon does not have is skipped."""
        try:
            out[label] = timed(make())
        except (AttributeError, ImportError, TypeError) as exc:
            print(f"breakdown: skipped {label}: {exc}", file=sys.stderr)

    from trainmon.config import PipelineConfig
    from trainmon.core.aggregate import WindowAggregator
    from trainmon.core.writer import WriterGroup

    pipeline = Pipeline(WriterGroup([]), PipelineConfig(), WindowAggregator(10), None)
    pipeline.close()  # stops its thread; the stages below then run on this thread only
    piece(
        "Pipeline.records_of (entries -> StepScalars)",
        lambda: partial(pipeline.records_of, entries),
    )
    piece(
        "Pipeline.run_stages, no writers (records + windows)",
        lambda: partial(pipeline.run_stages, entries),
    )

    def aggregator() -> Callable[[], Any]:
        from trainmon.core.aggregate import WindowAggregator

        return partial(WindowAggregator(10).add, records)

    piece("WindowAggregator.add, 10-step windows", aggregator)
    writers: list[tuple[str, Any]] = [
        ("TensorBoardWriter.write", TensorBoardWriter(folder / "tb")),
        ("JsonlWriter.write", JsonlWriter(folder / "jsonl")),
        ("CsvWriter.write", CsvWriter(folder / "csv")),
    ]
    for label, writer in writers:
        piece(label, partial(partial, writer.write, records))

    def jsonl_windows() -> Callable[[], Any]:
        from trainmon.core.aggregate import WindowAggregator

        windows = WindowAggregator(10).add(records)
        return partial(writers[1][1].write_windows, windows)

    piece("JsonlWriter.write_windows, 10-step windows", jsonl_windows)
    for _, writer in writers:
        writer.close()
    return out


def idle_cost(seconds: float = 2.0) -> dict[str, float]:
    """Background CPU per second of wall time with nothing logged (ms/s)."""
    import trainmon

    def per_second() -> float:
        p0 = time.process_time_ns()
        t0 = time.thread_time_ns()
        w0 = time.perf_counter()
        deadline = w0 + seconds
        while time.perf_counter() < deadline:
            time.sleep(0.001)  # a training loop that is busy elsewhere (GIL released)
        background = (time.process_time_ns() - p0) - (time.thread_time_ns() - t0)
        return max(0.0, background / 1e6 / (time.perf_counter() - w0))

    out = {"nothing running": per_second()}
    stop = threading.Event()

    def waiter() -> None:
        while not stop.wait(0.05):
            pass

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    out["bare thread looping on Event.wait(0.05)"] = per_second()
    stop.set()
    thread.join()
    with tempfile.TemporaryDirectory() as tmp:
        monitor = trainmon.Monitor(trainmon_config(Path(tmp), ("tensorboard", "jsonl"), 200_000))
        out["open trainmon Monitor (TB+JSONL), nothing logged"] = per_second()
        monitor.close()
    return out


def run(steps: int, repeats: int, folder: Path) -> dict[str, Any]:
    """The breakdown in a fresh interpreter (no other contender's threads or garbage)."""
    return harness.run_worker(
        __file__,
        ["--worker", "--steps", str(steps), "--repeats", str(repeats), "--folder", str(folder)],
    )


def print_result(breakdown: dict[str, Any]) -> None:
    """The three tables: hot-path pieces, background stages, idle cost."""
    print("\n## write_events hot path: thread CPU per call of 8 scalars (no writers)")
    if "error" in breakdown:
        print("  failed:", breakdown["error"])
    else:
        print(f"  (loop overhead {breakdown['loop_overhead_ns_per_call']:.0f} ns/call subtracted)")
        for name, ns in breakdown["ns_per_call"].items():
            print(f"  {name:<62} {ns:7.0f} ns/call  {ns / PER_STEP:6.1f} ns/scalar")
        print("\n## Background stages alone: thread CPU per scalar, batches of 256 steps")
        for name, ns in breakdown["background_ns_per_scalar"].items():
            print(f"  {name:<62} {ns:7.0f} ns/scalar")
        print("\n## Idle cost: CPU of other threads per second, main thread sleeping 1 ms")
        for name, ms in breakdown["idle"].items():
            print(f"  {name:<62} {ms:7.2f} ms/s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=25_000, help="calls per timed piece")
    parser.add_argument("--repeats", type=int, default=5, help="timings per piece (median)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2000 steps, 2 repeats")
    parser.add_argument("--json", default="", help="also write the result to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 2_000, 2
    if args.worker:
        try:
            folder = Path(args.folder or tempfile.mkdtemp())
            result = work_breakdown(args.steps, args.repeats, folder)
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        harness.emit_result(result)
        return 0
    info = harness.machine_info(INFO_MODULES)
    print(harness.machine_line(info))
    with tempfile.TemporaryDirectory(prefix="bench_write_breakdown_") as tmp:
        result = run(args.steps, args.repeats, Path(tmp))
    print_result(result)
    if warning := harness.busy_warning(info):
        print(warning)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "breakdown": result}, indent=2))
        print(f"\nwrote {args.json}")
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
