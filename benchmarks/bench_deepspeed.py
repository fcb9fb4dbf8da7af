"""What monitoring costs a real DeepSpeed step: bare, DeepSpeed's own monitor, ``trainmon.attach``.

Why: issue 13's goal is ``attach`` (TensorBoard + CSV + JSONL + the breakdown every step) at
most 2 % over bare DeepSpeed, while DeepSpeed's own monitor (TensorBoard + CSV +
``wall_clock_breakdown``) was measured at about +17 % per step here. The three run in ONE
process on three identical models (same seed, same batches), interleaved: each round runs one
block of steps of every contender in a shuffled order, and overheads are paired round by round
(median of the per-round ratios, with a bootstrap 95 % interval), so drifts of a shared
machine cancel out.

Contenders (an MLP 256→1024→1024→10, batch 64, ZeRO 0, fp32, ``torch_adam``, CPU, gloo):

* ``bare``     DeepSpeed alone (no monitor, no breakdown);
* ``ds``       DeepSpeed's own monitor: TensorBoard + CSV + ``wall_clock_breakdown``;
* ``attach``   the ``ds`` config plus ``trainmon.attach`` adding the JSONL journal (console
  off): DeepSpeed's breakdown is taken over by trainmon's timers, every step logs train/*,
  perf/* (the breakdown), mem/*, and DeepSpeed's Train/Samples events go through trainmon.

After each ``attach`` block ``monitor.flush()`` waits, outside the timed steps, until the
background thread has written the block, so its work never spills into another contender's
block. All three use ``steps_per_print: 10`` (DeepSpeed's progress line is the same for all).

Run: ``DS_ACCELERATOR=cpu .venv/bin/python benchmarks/bench_deepspeed.py [--rounds 30]
[--steps 20] [--tiny]``; ``--tiny`` uses ``Linear(16, 10)``, where attach's fixed cost per
step shows; ``--quick`` is a smoke run (numbers are noise). Wall time and the training
thread's CPU time (``time.thread_time``, less sensitive to other processes) are both paired.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _key, _value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
    os.environ.setdefault(_key, _value)
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
if "MASTER_PORT" not in os.environ:
    with socket.socket() as _sock:
        _sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(_sock.getsockname()[1])

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402

BATCH = 64
IN_TINY = 16
CONTENDERS = ("bare", "ds", "attach")


def build_model(seed: int, tiny: bool) -> torch.nn.Module:
    torch.manual_seed(seed)
    if tiny:
        return torch.nn.Linear(IN_TINY, 10)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def ds_config(out: Path, name: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "train_batch_size": BATCH,
        "steps_per_print": 10,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 0},
    }
    if name != "bare":
        config["wall_clock_breakdown"] = True
        config["tensorboard"] = {"enabled": True, "output_path": str(out), "job_name": name}
        config["csv_monitor"] = {"enabled": True, "output_path": str(out), "job_name": name}
    return config


def run_block(
    engine: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[list[float], list[float]]:
    """Wall seconds and training-thread CPU seconds per step for one block."""
    walls, cpus = [], []
    loss_fn = torch.nn.functional.cross_entropy
    for x, y in batches:
        start, cpu = time.perf_counter(), time.thread_time()
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()
        walls.append(time.perf_counter() - start)
        cpus.append(time.thread_time() - cpu)
    return walls, cpus


def bootstrap_ci(values: list[float], rounds: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="Linear(16, 10): the fixed cost")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 3, 5
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    out = Path(tempfile.mkdtemp(prefix="bench-ds-"))
    engines: dict[str, Any] = {}
    monitor = None
    for name in CONTENDERS:
        model = build_model(0, args.tiny)
        engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config(out, name)
        )
        if name == "attach":
            extra = {
                "jsonl": {"enabled": True, "output_path": str(out), "job_name": name},
                "console": {"enabled": False},
            }
            monitor = trainmon.attach(engine, extra)
        engines[name] = engine
    gen = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randn(BATCH, IN_TINY if args.tiny else 256, generator=gen),
            torch.randint(0, 10, (BATCH,), generator=gen),
        )
        for _ in range(args.steps)
    ]
    for name in CONTENDERS:  # warm-up
        run_block(engines[name], batches[:3])
    order = list(CONTENDERS)
    rng = random.Random(2)
    per_round: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    per_round_cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    every_step: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    every_cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for _ in range(args.rounds):
        rng.shuffle(order)
        for name in order:
            times, cpus = run_block(engines[name], batches)
            per_round[name].append(statistics.median(times))
            per_round_cpu[name].append(statistics.median(cpus))
            every_step[name].extend(times)
            every_cpu[name].extend(cpus)
            if name == "attach" and monitor is not None:
                monitor.flush()
    if monitor is not None:
        monitor.close()
    model_name = "Linear(16, 10)" if args.tiny else "MLP 256-1024-1024-10"
    print(
        f"{model_name}, python {sys.version.split()[0]}, torch {torch.__version__}, deepspeed "
        f"{deepspeed.__version__}, {args.rounds} rounds x {args.steps} steps, "
        f"load {load_start:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print("| contender | median ms/step | p10 | p90 | thread CPU ms/step |")
    print("|---|---:|---:|---:|---:|")
    for name in CONTENDERS:
        ordered = sorted(every_step[name])
        p10 = ordered[int(0.1 * len(ordered))] * 1e3
        p90 = ordered[int(0.9 * len(ordered)) - 1] * 1e3
        cpu = statistics.median(every_cpu[name]) * 1e3
        print(
            f"| {name} | {statistics.median(ordered) * 1e3:.3f} | {p10:.3f} | {p90:.3f} "
            f"| {cpu:.3f} |"
        )
    print()
    print("| comparison | wall overhead [95% CI] | thread-CPU overhead [95% CI] |")
    print("|---|---:|---:|")
    for a, b in (("ds", "bare"), ("attach", "bare"), ("attach", "ds")):
        cells = []
        for series in (per_round, per_round_cpu):
            ratios = [x / y - 1.0 for x, y in zip(series[a], series[b], strict=True)]
            low, high = bootstrap_ci(ratios)
            cells.append(
                f"{statistics.median(ratios) * 100:+.2f}% [{low * 100:+.2f}%, {high * 100:+.2f}%]"
            )
        print(f"| {a} / {b} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
