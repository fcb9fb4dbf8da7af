"""Tensor capture timed the way the README shows it: ``monitor.step = k`` then
``monitor.write_events(list(zip(names, tensors)))`` (pairs) or a list of ``(name, tensor, k)``
(triples), 16 same-shape 0-d CPU tensors, a JSONL journal, nothing flushed inside a round: the
background thread turns earlier calls into records and lines while the loop runs, as in a
training job (no flush between the monitor's rounds: what one round queued competes with the
next, as in a long run). Each round is timed against ``torch.stack`` of the same 16 tensors
(the floor), in one process, in a shuffled order; the floor's rounds start after an untimed
flush, so the background's backlog never slows the floor.

Two settings:

* ``tight``: the calls back to back, the worst case (the background competes with the caller
  for the GIL all the time).
* ``op``: a ~1 ms GIL-releasing wait between calls (``time.sleep``, as a device sync or a
  kernel launch queue would), a training step's shape. Only the call is timed there; a GIL the
  background holds when the wait ends stretches the wait instead, so the wait's own overrun
  against the floor's rounds is reported too (``op stretch``).

``flat`` times 100,000 calls of pairs in one tight run and compares the mean call of the last
10 % with the first 10 % (the journal, the window and the names seen must not make calls
slower as a run goes on).

Used by ``bench_capture.py`` (``--as-called``); run alone:
``.venv/bin/python benchmarks/capture_as_called.py [--rounds 10] [--calls 2000]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import harness
import trainmon

TENSORS = 16
TARGET_RATIO = 1.5  # a call of 16 tensors against one torch.stack of them
TARGET_FLAT = 1.10  # the last 10 % of calls against the first 10 %
OP_S = 0.001


def _monitor() -> trainmon.Monitor:
    folder = Path(tempfile.mkdtemp(prefix="trainmon-bench-as-called-"))
    section = {"enabled": True, "output_path": str(folder), "job_name": "bench"}
    return trainmon.Monitor({"jsonl": section, "console": {"enabled": False}})


def _calls(monitor: trainmon.Monitor) -> dict[str, Callable[[int], None]]:
    """The three contenders, each one call at step ``k`` exactly as a user writes it."""
    names = [f"train/m{i}" for i in range(TENSORS)]
    tensors = [torch.tensor(float(i)) for i in range(TENSORS)]

    def pairs(k: int) -> None:
        monitor.step = k
        monitor.write_events(list(zip(names, tensors)))  # noqa: B905  (the call as users write it)

    def triples(k: int) -> None:
        monitor.step = k
        monitor.write_events([(name, tensor, k) for name, tensor in zip(names, tensors)])  # noqa: B905

    def floor(k: int) -> None:
        torch.stack(tensors)

    return {"pairs": pairs, "triples": triples, "floor: torch.stack": floor}


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p10": harness.percentile(values, 0.1),
        "p90": harness.percentile(values, 0.9),
        "min": min(values),
        "max": max(values),
    }


def run_setting(setting: str, rounds: int, calls: int) -> dict[str, Any]:
    """Median (and spread) µs per call of each contender, rounds interleaved."""
    perf = time.perf_counter_ns
    call_us: dict[str, list[float]] = {}
    op_us: dict[str, list[float]] = {}
    with _monitor() as monitor:
        table = _calls(monitor)
        step = 0
        for call in table.values():  # warm-up: names registered, torch ops dispatched once
            for _ in range(300):
                step += 1
                call(step)
        monitor.flush()

        def one(name: str, _round: int, recorded: bool) -> None:
            nonlocal step
            call = table[name]
            if name.startswith("floor"):  # untimed: the floor runs with the background idle
                monitor.flush()
            first = step + 1
            step += calls
            if setting == "tight":
                start = perf()
                for k in range(first, first + calls):
                    call(k)
                took, waited = perf() - start, 0
            else:
                took = waited = 0
                for k in range(first, first + calls):
                    w0 = perf()
                    time.sleep(OP_S)
                    w1 = perf()
                    call(k)
                    w2 = perf()
                    waited += w1 - w0
                    took += w2 - w1
            if recorded:
                call_us.setdefault(name, []).append(took / calls / 1e3)
                op_us.setdefault(name, []).append(waited / calls / 1e3)

        harness.interleaved_rounds(list(table), rounds, one, rng=random.Random(), warmup_rounds=1)
        dropped = monitor.dropped_events
    floor = statistics.median(call_us["floor: torch.stack"])
    floor_op = statistics.median(op_us["floor: torch.stack"])
    out: dict[str, Any] = {"setting": setting, "rounds": rounds, "calls": calls}
    out["dropped"] = dropped
    out["cases"] = {
        name: {
            "call_us": _spread(values),
            "ratio": statistics.median(values) / floor,
            "op_stretch_us": statistics.median(op_us[name]) - floor_op if setting == "op" else 0.0,
        }
        for name, values in call_us.items()
    }
    return out


def run_flat(calls: int = 100_000, chunk: int = 100) -> dict[str, Any]:
    """Per call over the first and the last 10 % of one long tight run of pairs: the mean, and
    the median of its chunks of ``chunk`` calls (what a typical call costs, which a machine
    hiccup or a collection in one chunk does not move)."""
    perf = time.perf_counter_ns
    with _monitor() as monitor:
        pairs = _calls(monitor)["pairs"]
        marks = [perf()]
        for k in range(1, calls + 1):
            pairs(k)
            if k % chunk == 0:
                marks.append(perf())
        monitor.flush()
    chunks = [(b - a) / chunk / 1e3 for a, b in itertools.pairwise(marks)]
    per_tenth = len(chunks) // 10
    tenths = [chunks[i * per_tenth : (i + 1) * per_tenth] for i in range(10)]
    means = [statistics.fmean(t) for t in tenths]
    medians = [statistics.median(t) for t in tenths]
    return {
        "calls": calls,
        "first_us": means[0],
        "last_us": means[-1],
        "growth": means[-1] / means[0],
        "first_median_us": medians[0],
        "last_median_us": medians[-1],
        "median_growth": medians[-1] / medians[0],
        "tenths": [round(m, 2) for m in means],
        "tenth_medians": [round(m, 2) for m in medians],
    }


def report(settings: list[dict[str, Any]], flat: dict[str, Any] | None) -> list[tuple[str, bool]]:
    """Print the tables; the goals as (text, met)."""
    verdicts = []
    for result in settings:
        print(
            f"\nas users call it, {result['setting']} ({result['rounds']} rounds of "
            f"{result['calls']} calls, 16 0-d CPU tensors, JSONL journal):"
        )
        lines = []
        for name, row in result["cases"].items():
            spread = row["call_us"]
            stretch = f"{row['op_stretch_us']:+.1f}" if result["setting"] == "op" else ""
            lines.append(
                (
                    name,
                    f"{spread['median']:.2f}",
                    f"{spread['p10']:.2f}–{spread['p90']:.2f}",
                    f"{row['ratio']:.2f}×",
                    stretch,
                )
            )
        columns = [("case", -22), ("µs/call", 9), ("p10–p90", 14), ("× stack", 8)]
        harness.print_columns([*columns, ("op stretch µs", 14)], lines)
        for name in ("pairs", "triples"):
            ratio = result["cases"][name]["ratio"]
            verdicts.append(
                (
                    f"{name}, {result['setting']}: ≤ {TARGET_RATIO}× torch.stack",
                    ratio <= TARGET_RATIO,
                )
            )
    if flat is not None:
        print(
            f"\n{flat['calls']:,} calls of pairs: first 10 % {flat['first_us']:.2f} µs/call, "
            f"last 10 % {flat['last_us']:.2f} µs/call ({flat['growth']:.2f}×); by tenth: "
            f"{flat['tenths']}\nmedian of 100-call chunks: first 10 % "
            f"{flat['first_median_us']:.2f}, last 10 % {flat['last_median_us']:.2f} µs/call "
            f"({flat['median_growth']:.2f}×); by tenth: {flat['tenth_medians']}"
        )
        verdicts.append(
            (
                f"last 10 % within {TARGET_FLAT:.2f}× the first (means)",
                flat["growth"] <= TARGET_FLAT,
            )
        )
        verdicts.append(
            (
                f"last 10 % within {TARGET_FLAT:.2f}× the first (chunk medians)",
                flat["median_growth"] <= TARGET_FLAT,
            )
        )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--op-calls", type=int, default=300)
    parser.add_argument("--flat-calls", type=int, default=100_000)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    info = harness.machine_info(("trainmon", "torch"))
    print(harness.machine_line(info))
    settings = [
        run_setting("tight", args.rounds, args.calls),
        run_setting("op", args.rounds, args.op_calls),
    ]
    flat = run_flat(args.flat_calls) if args.flat_calls else None
    verdicts = report(settings, flat)
    for text, ok in verdicts:
        print(f"target {text}: {'met' if ok else 'NOT met'}")
    if args.json:
        payload = {"machine": info, "settings": settings, "flat": flat}
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
