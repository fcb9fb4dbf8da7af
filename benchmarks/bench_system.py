"""What the diagnostics cost: one system-metrics sample, the sampler's effect on a training
step's wall time, and the idle profile-on-demand check at a step boundary.

* **Per sample**: ``SystemSampler.sample()`` on this thread (what the sampler thread does every
  ``interval_s``): wall and CPU time, median and p10/p90 over ``--samples`` samples.
* **Per step, sampler on vs off**: a training step (a few small matmuls, about 1 ms) plus
  ``monitor.step = s`` and one ``log``, with the sampler at ``--interval`` s (1000 times the
  default rate, to make its cost visible) against ``system_metrics.enabled: false``; rounds
  interleaved in a fresh random order, the overhead is the median over rounds of the paired
  ratio with a bootstrap 95 % interval.
* **Step boundary**: ``monitor.step = s`` with ``profiler.enabled`` true (no profile asked: one
  flag read) against false, µs per call.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_system.py [--rounds R] [--steps N]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import harness
import trainmon
from trainmon.collect.system import SystemSampler


def _config(base: Path, sampler: bool, profiler: bool, interval: float) -> dict[str, Any]:
    return {
        "steps_per_print": 50,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "system_metrics": {"enabled": sampler, "interval_s": interval},
        "profiler": {"enabled": profiler},
    }


def per_sample(samples: int) -> dict[str, float]:
    sampler = SystemSampler(lambda items: None, 1.0)
    try:
        sampler.prime()
        timings = harness.time_calls(sampler.sample, samples, warmup=5)
        names = len(timings.last)
    finally:
        sampler.close()
    wall, cpu = harness.summary_us(timings.wall_ns), harness.summary_us(timings.thread_ns)
    return {"wall_us": wall["median_us"], "wall_p10": wall["p10_us"], "wall_p90": wall["p90_us"],
            "cpu_us": cpu["median_us"], "metrics": names}  # fmt: skip


def step_overhead(rounds: int, steps: int, interval: float, seed: int) -> tuple[float, Any]:
    weights = torch.randn(128, 128)

    def train_step(x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.tanh(x @ weights)
        return x

    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        monitors = {
            on: trainmon.Monitor(_config(Path(tmp) / str(on), on, False, interval))
            for on in (True, False)
        }
        x = torch.randn(16, 128)
        counters = dict.fromkeys((True, False), 0)

        def run(on: bool, index: int, recorded: bool) -> None:
            monitor = monitors[on]
            start = time.perf_counter()
            for _ in range(steps):
                counters[on] += 1
                y = train_step(x)
                monitor.step = counters[on]
                monitor.log({"train/loss": 1.0})
            elapsed = (time.perf_counter() - start) / steps * 1e6
            del y
            monitor.flush()
            if recorded:
                times[on].append(elapsed)

        harness.interleaved_rounds(
            [True, False], rounds, run, rng=random.Random(seed), warmup_rounds=2
        )
        for monitor in monitors.values():
            monitor.close()
    overhead = harness.paired_overhead(times[True], times[False], random.Random(seed), 2000)
    return statistics.median(times[False]), overhead


def boundary_us(calls: int, rounds: int) -> dict[bool, float]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for on in (False, True):
            monitor = trainmon.Monitor(_config(Path(tmp) / str(on), False, on, 10.0))

            def set_step(i: int, monitor: trainmon.Monitor = monitor) -> None:
                monitor.step = i

            out[on] = statistics.median(harness.per_call_us(set_step, calls, rounds))
            monitor.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run (numbers are noise)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.samples = 4, 50, 30
    info = harness.machine_info(("trainmon", "torch", "psutil"))
    print(harness.machine_line(info))
    sample = per_sample(args.samples)
    print(
        f"\none sample ({sample['metrics']:.0f} metrics): wall {sample['wall_us']:.1f} µs "
        f"(p10 {sample['wall_p10']:.1f}, p90 {sample['wall_p90']:.1f}), "
        f"CPU {sample['cpu_us']:.1f} µs"
    )
    bare_us, (overhead, interval) = step_overhead(args.rounds, args.steps, args.interval, args.seed)
    print(
        f"step wall time, sampler every {args.interval} s vs off: bare {bare_us:.1f} µs/step, "
        f"overhead {harness.percent_ci(overhead, interval)}"
    )
    boundary = boundary_us(100_000, 10)
    print(
        f"monitor.step = s: profiler off {boundary[False] * 1e3:.0f} ns, "
        f"on and idle {boundary[True] * 1e3:.0f} ns"
    )
    print(harness.busy_warning(info))


if __name__ == "__main__":
    main()
