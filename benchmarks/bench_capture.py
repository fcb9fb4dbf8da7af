"""Calling-thread cost of logging tensors (captured at the call) and plain numbers.

One process, one ``Monitor`` (TensorBoard + JSONL, console off, default queue), values logged
with ``write_events``. Rounds interleave the cases in a shuffled order; each round times a block
of calls with ``time.thread_time_ns`` (the calling thread's CPU) and ``perf_counter_ns``, then
waits untimed for the background thread (``flush``) so its work does not overlap the next
block. Reported: the median over rounds, per call and per scalar.

Cases: 1, 4, 8 and 16 0-d float32 CPU tensors per call (a fresh ``loss``-like tensor with
``requires_grad`` among them), 16 tensors of mixed shapes and dtypes (two stacks), 8 floats as
pairs and as triples; and, for attribution, ``torch.stack`` of the same 16 tensors alone (under
``torch.no_grad()``) and trainmon's ``values.capture`` of them alone (stack plus its checks).

Then the calls as the README shows them (``capture_as_called.py``): ``monitor.step = k`` and
``write_events(list(zip(names, tensors)))`` (pairs) or a list of ``(name, tensor, k)`` (triples)
with nothing flushed inside a round, in a tight loop and with a ~1 ms GIL-releasing wait
between calls, each against the interleaved ``torch.stack`` floor; and 100,000 calls' first
and last tenths (``--as-called-only`` runs just that part, ``--no-as-called`` skips it).

Run: ``.venv/bin/python benchmarks/bench_capture.py [--rounds 15] [--calls 2000] [--json out]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

import capture_as_called
import harness
import trainmon

capture: Callable[..., Any] | None
try:
    from trainmon.core.values import capture
except ImportError:  # a trainmon from before capture (to compare against): that case is skipped
    capture = None

TARGET_TENSOR_CALL_US = 10.0  # per call of up to 16 tensors
TARGET_SCALAR_US = 0.2  # per float/int scalar (issue 43; was 0.5)
TARGET_VS_SUMMARYWRITER = 150.0  # SummaryWriter.add_scalar per scalar / trainmon's, one process
SUMMARY_WRITER_CASE = "torch SummaryWriter.add_scalar of the 8 (name, value) floats"


def _tensor_events(count: int) -> tuple[tuple[str, Any], ...]:
    loss = (torch.tensor(2.0, requires_grad=True) * 1.5).sum()
    values = [loss] + [torch.tensor(float(i)) for i in range(1, count)]
    return tuple((f"t/{i}", value) for i, value in enumerate(values))


def _mixed_events() -> tuple[tuple[str, Any], ...]:
    values: list[Any] = [torch.tensor(float(i)) for i in range(12)]
    values += [torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor(3), torch.tensor(4)]
    return tuple((f"m/{i}", value) for i, value in enumerate(values))


def cases(monitor: trainmon.Monitor) -> dict[str, tuple[int, Callable[[], None]]]:
    """Name -> (scalars per call, one call)."""
    write = monitor.write_events
    out: dict[str, tuple[int, Callable[[], None]]] = {}
    for count in (1, 4, 8, 16):
        events = _tensor_events(count)
        out[f"{count} tensors"] = (count, partial(write, events))
    mixed = _mixed_events()
    out["16 tensors, mixed shapes/dtypes"] = (16, lambda: write(mixed))
    pairs = tuple((f"f/{i}", 0.5 * i) for i in range(8))
    out["8 floats (name, value)"] = (8, lambda: write(pairs))
    triples = tuple((f"g/{i}", 0.5 * i, 7) for i in range(8))
    out["8 floats (name, value, step)"] = (8, lambda: write(triples))
    sixteen = [value for _, value in _tensor_events(16)]

    def stack_only() -> None:
        with torch.no_grad():
            torch.stack(sixteen)

    out["floor: torch.stack of 16 (no monitor)"] = (16, stack_only)
    names = [f"t/{i}" for i in range(16)]
    if capture is not None:
        take = capture

        def capture_only() -> None:
            take(sixteen, names)

        out["values.capture of 16 (no monitor)"] = (16, capture_only)
    return out


def run(rounds: int, calls: int) -> dict[str, Any]:
    """Median calling-thread CPU and wall time per call for every case."""
    folder = Path(tempfile.mkdtemp(prefix="trainmon-bench-capture-"))
    section = {"enabled": True, "output_path": str(folder), "job_name": "bench"}
    config = {"tensorboard": section, "jsonl": section, "console": {"enabled": False}}
    samples: dict[str, list[tuple[float, float]]] = {}
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder / "summarywriter"))
    with trainmon.Monitor(config) as monitor:
        table = cases(monitor)
        pairs = tuple((f"f/{i}", 0.5 * i) for i in range(8))
        steps = iter(range(10**9))

        def summary_writer() -> None:  # the same 8 floats, one add_scalar each
            step = next(steps)
            for name, value in pairs:
                writer.add_scalar(name, value, step)

        table[SUMMARY_WRITER_CASE] = (8, summary_writer)
        for _, call in table.values():  # warm-up: names cached, torch ops dispatched once
            for _ in range(200):
                call()
        monitor.flush()

        def one(name: str, _round: int, _recorded: bool) -> None:
            _, call = table[name]

            def block() -> None:
                for step in range(calls):
                    monitor.step = step
                    call()

            timed = harness.time_calls(block, 1)
            samples.setdefault(name, []).append(
                (timed.thread_ns[0] / calls / 1e3, timed.wall_ns[0] / calls / 1e3)
            )
            monitor.flush()

        harness.interleaved_rounds(list(table), rounds, one, rng=random.Random())
        dropped = monitor.dropped_events
    writer.close()
    result: dict[str, Any] = {"rounds": rounds, "calls": calls, "dropped": dropped, "cases": {}}
    for name, (scalars, _) in table.items():
        cpu = [c for c, _ in samples[name]]
        wall = [w for _, w in samples[name]]
        result["cases"][name] = {
            "scalars": scalars,
            "call_cpu_us": statistics.median(cpu),
            "call_wall_us": statistics.median(wall),
            "cpu_min_us": min(cpu),
            "cpu_max_us": max(cpu),
        }
    return result


def step_cost_us(rounds: int, calls: int) -> float:
    """``monitor.step = s`` alone (included in every case's figure), for subtraction."""
    with trainmon.Monitor({"console": {"enabled": False}}) as monitor:

        def set_step(step: int) -> None:
            monitor.step = step

        times = harness.per_call_us(set_step, calls, rounds, clock=time.thread_time_ns)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", default="")
    parser.add_argument("--no-as-called", action="store_true")
    parser.add_argument("--as-called-only", action="store_true")
    parser.add_argument("--flat-calls", type=int, default=100_000)
    parser.add_argument("--op-calls", type=int, default=300)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.as_called_only:
        return as_called(args, {})
    result = run(args.rounds, args.calls)
    result["step_setter_us"] = step_cost_us(args.rounds, args.calls * 5)
    result["machine"] = harness.machine_info(("trainmon", "torch"))
    print(harness.machine_line(result["machine"]))
    lines = [
        (
            name,
            f"{row['call_cpu_us']:.2f}",
            f"{row['call_cpu_us'] / row['scalars']:.3f}",
            f"{row['call_wall_us']:.2f}",
            f"{row['cpu_min_us']:.2f}–{row['cpu_max_us']:.2f}",
        )
        for name, row in result["cases"].items()
    ]
    columns = [("case", -40), ("µs/call", 9), ("µs/scalar", 10), ("wall µs/call", 13)]
    harness.print_columns([*columns, ("range", 15)], lines)
    print(f"(each includes `monitor.step = s`: {result['step_setter_us']:.3f} µs/call)")
    print(f"dropped: {result['dropped']}")
    verdicts = []
    cases_ = result["cases"]
    uniform = max(row["call_cpu_us"] for name, row in cases_.items() if name.endswith(" tensors"))
    mixed = cases_["16 tensors, mixed shapes/dtypes"]["call_cpu_us"]
    verdicts.append(
        ("≤ 10 µs per call of 1–16 same-shape tensors", uniform <= TARGET_TENSOR_CALL_US)
    )
    verdicts.append(("≤ 10 µs per call of 16 mixed tensors", mixed <= TARGET_TENSOR_CALL_US))
    float_rows = [row for name, row in cases_.items() if "floats (" in name]
    worst_float = max(row["call_cpu_us"] / row["scalars"] for row in float_rows)
    verdicts.append((f"≤ {TARGET_SCALAR_US} µs per float scalar", worst_float <= TARGET_SCALAR_US))
    writer_scalar = cases_[SUMMARY_WRITER_CASE]["call_cpu_us"] / 8
    times = writer_scalar / worst_float
    print(f"SummaryWriter.add_scalar per scalar / trainmon's worst float path: {times:.0f}×")
    verdicts.append(
        (
            f"≥ {TARGET_VS_SUMMARYWRITER:.0f}× SummaryWriter.add_scalar",
            times >= TARGET_VS_SUMMARYWRITER,
        )
    )
    for text, ok in verdicts:
        print(f"target {text}: {'met' if ok else 'NOT met'}")
    code = 0 if all(ok for _, ok in verdicts) else 1
    if args.no_as_called:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return code
    return max(code, as_called(args, result))


def as_called(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """The README's pattern, tight and with a 1 ms wait, and the long run's flatness."""
    settings = [
        capture_as_called.run_setting("tight", args.rounds, args.calls),
        capture_as_called.run_setting("op", args.rounds, args.op_calls),
    ]
    flat = capture_as_called.run_flat(args.flat_calls) if args.flat_calls else None
    verdicts = capture_as_called.report(settings, flat)
    for text, ok in verdicts:
        print(f"target {text}: {'met' if ok else 'NOT met'}")
    if args.json:
        result["as_called"] = {"settings": settings, "flat": flat}
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
