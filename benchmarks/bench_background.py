"""What trainmon's background threads cost beside training, and why wake-ups matter.

Why: "never slows training" is about the user's wall clock, and work on other threads is not
free for the training thread even when it never holds the GIL (cores share caches, memory
bandwidth and a clock budget). Three measurements, each in one process:

1. **Background CPU per step** (process CPU minus the training thread's CPU) of a paced loop
   that logs 30 scalars every 8 ms (``time.sleep``, so the training thread is idle and the
   background has a core to itself), for ``trainmon.drain_interval_s`` = 0.05 (the former
   fixed poll), 0.25 (the default until issue 25) and 1.0 (the default now), with no writers
   and with TensorBoard + CSV + JSONL. Each block builds a fresh ``Monitor``, logs 40 untimed
   steps, then counts the CPU of ``--steps`` steps and of ``close()`` (what was still queued
   is the same work, done later).
2. **Interference**: a real training step (an MLP of 4 × Linear(512, 512) with ReLU, batch 32,
   MSE, Adam, ``torch.set_num_threads(1)``) while a helper thread wakes every 50 ms for a 1.5 ms
   burst (3 % of one core): nothing, pure Python (holds the GIL), or hashing a buffer (C that
   releases the GIL). Wall overhead against the no-burst blocks, paired by round.
3. **One wake-up**: the CPU a sleeping thread spends per wake-up (its own thread CPU over
   ``--wakes`` wake-ups, doing nothing else): a timed sleep, a timed ``Event.wait`` running
   out, and an ``Event`` set by another thread (how a writer's thread is woken). On a VM this
   includes the hypervisor's timer and wake-up work, which is why trainmon wakes its threads
   rarely.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_background.py [--rounds 12]
[--steps 250] [--interference-rounds 60] [--wakes 200]`` (``--quick``: a smoke run whose
numbers are noise).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import harness

SCALARS_PER_STEP = 30
STEP_S = 0.008
BURST_EVERY_S = 0.05
BURST_S = 0.0015
RESAMPLES = 2000
DRAINS = (0.05, 0.25, 1.0)


def _config(folder: Path, drain: float, writers: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "trainmon": {"drain_interval_s": drain},
    }
    if writers:
        for key in ("tensorboard", "csv_monitor", "jsonl"):
            config[key] = {"enabled": True, "output_path": str(folder), "job_name": key}
    return config


def background_cpu(rounds: int, steps: int) -> dict[str, list[float]]:
    """µs of background CPU per paced step, one figure per round, by ``writers@drain``."""
    import trainmon

    contenders = [(writers, drain) for writers in (False, True) for drain in DRAINS]
    got: dict[str, list[float]] = {
        f"{'TB+CSV+JSONL' if writers else 'no writers'} @ {drain:g} s": []
        for writers, drain in contenders
    }
    names = [f"m/{i}" for i in range(SCALARS_PER_STEP)]

    def block(contender: tuple[bool, float], index: int, recorded: bool) -> None:
        writers, drain = contender
        with tempfile.TemporaryDirectory() as tmp:
            config = _config(Path(tmp), drain, writers)
            monitor = trainmon.Monitor(config) if writers else trainmon.Monitor(config, writers=[])
            for step in range(40):  # untimed: writers open their files
                monitor.step = step
                monitor.write_events([(name, float(step)) for name in names])
            monitor.flush()
            process0, thread0 = time.process_time(), time.thread_time()
            for step in range(40, 40 + steps):
                due = time.perf_counter() + STEP_S
                monitor.step = step
                monitor.write_events([(name, float(step)) for name in names])
                while time.perf_counter() < due:
                    time.sleep(0.001)
            monitor.close()  # counted: what was still queued is the same work, done later
            thread = time.thread_time() - thread0
            other = time.process_time() - process0 - thread
        if recorded:
            key = f"{'TB+CSV+JSONL' if writers else 'no writers'} @ {drain:g} s"
            got[key].append(other / steps * 1e6)

    harness.interleaved_rounds(contenders, rounds, block, warmup_rounds=1)
    return got


def interference(rounds: int, steps: int) -> dict[str, list[float]]:
    """Wall ms per training step, one figure per round, by what the helper thread does."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(4):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(net.parameters(), 1e-3)
    inputs, targets = torch.randn(32, 512), torch.randn(32, 512)
    buffer = b"x" * 200_000
    mode = {"now": "none"}
    stop = threading.Event()

    def burst() -> None:
        while not stop.wait(BURST_EVERY_S):
            kind, start = mode["now"], time.perf_counter()
            while kind != "none" and time.perf_counter() - start < BURST_S:
                if kind == "Python (holds the GIL)":
                    sum(range(100))
                else:
                    hashlib.sha256(buffer).digest()

    helper = threading.Thread(target=burst, daemon=True)
    helper.start()
    kinds = ("none", "Python (holds the GIL)", "C (releases the GIL)")
    got: dict[str, list[float]] = {kind: [] for kind in kinds}

    def block(kind: str, index: int, recorded: bool) -> None:
        mode["now"] = kind
        time.sleep(BURST_EVERY_S)
        start = time.perf_counter()
        for _ in range(steps):
            loss = torch.nn.functional.mse_loss(net(inputs), targets)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        if recorded:
            got[kind].append((time.perf_counter() - start) / steps * 1e3)
        mode["now"] = "none"

    harness.interleaved_rounds(kinds, rounds, block, warmup_rounds=2)
    stop.set()
    helper.join()
    return got


def wake_cost(wakes: int) -> dict[str, float]:
    """µs of a thread's own CPU per wake-up, by how it sleeps and is woken."""
    got: dict[str, float] = {}
    timed = threading.Event()
    kicked = threading.Event()

    def sleeper(label: str, wait: Any) -> None:
        start = time.thread_time()
        for _ in range(wakes):
            wait()
        got[label] = (time.thread_time() - start) / wakes * 1e6

    def woken() -> None:
        kicked.wait()
        kicked.clear()

    def kicker() -> None:
        while "Event set by another thread (every 5 ms)" not in got:
            time.sleep(0.005)
            kicked.set()

    sleeper("time.sleep(5 ms)", lambda: time.sleep(0.005))
    sleeper("Event.wait(5 ms) running out", lambda: timed.wait(0.005))
    other = threading.Thread(target=kicker, daemon=True)
    other.start()
    sleeper("Event set by another thread (every 5 ms)", woken)
    other.join()
    return got


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--interference-rounds", type=int, default=60)
    parser.add_argument("--wakes", type=int, default=200, help="wake-ups per kind timed")
    parser.add_argument("--quick", action="store_true", help="smoke run; numbers are noise")
    options = parser.parse_args(argv)
    if options.quick:
        options.rounds, options.steps, options.interference_rounds, options.wakes = 2, 30, 3, 20
    info = harness.machine_info(("trainmon", "torch"))
    print(harness.machine_line(info))
    rng = random.Random(0)

    print(
        f"\nbackground CPU per step ({SCALARS_PER_STEP} scalars every {STEP_S * 1e3:g} ms), "
        f"{options.rounds} rounds x {options.steps} steps, median [95% CI]"
    )
    rows = []
    for key, values in background_cpu(options.rounds, options.steps).items():
        median, (low, high) = harness.bootstrap_median(values, rng, RESAMPLES)
        share = median / (STEP_S * 1e6)
        rows.append((key, f"{median:.0f} [{low:.0f}, {high:.0f}]", f"{share * 100:.2f}%"))
    harness.print_markdown_table(("writers @ drain_interval_s", "µs / step", "of a step"), rows)

    print(
        f"\ntraining step with a {BURST_S * 1e3:g} ms burst every {BURST_EVERY_S * 1e3:g} ms on "
        f"another thread ({BURST_S / BURST_EVERY_S * 100:.0f}% of a core), "
        f"{options.interference_rounds} rounds x 20 steps"
    )
    walls = interference(options.interference_rounds, 20)
    rows = []
    for kind, values in walls.items():
        if kind == "none":
            rows.append((kind, f"{statistics.median(values):.3f}", "-"))
            continue
        overhead, interval = harness.paired_overhead(values, walls["none"], rng, RESAMPLES)
        rows.append(
            (kind, f"{statistics.median(values):.3f}", harness.percent_ci(overhead, interval))
        )
    harness.print_markdown_table(("other thread", "wall ms / step", "wall overhead"), rows)

    print(f"\nCPU of one wake-up of a sleeping thread, mean of {options.wakes}")
    wakes = [(kind, f"{us:.1f}") for kind, us in wake_cost(options.wakes).items()]
    harness.print_markdown_table(("how it sleeps and wakes", "µs of its CPU per wake-up"), wakes)
    if warning := harness.busy_warning(info):
        print(warning)


if __name__ == "__main__":
    main()
