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
import tempfile
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

import harness  # noqa: E402
import trainmon  # noqa: E402

BATCH = 64
IN_TINY = 16
CONTENDERS = ("bare", "ds", "attach")
COMPARISONS = (("ds", "bare"), ("attach", "bare"), ("attach", "ds"))
BOOTSTRAP_RESAMPLES = 2000


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


def run_block(engine: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> harness.Timings:
    """One block: a training step per batch, each timed (wall and training-thread CPU)."""
    loss_fn = torch.nn.functional.cross_entropy
    feed = iter(batches)

    def step() -> None:
        x, y = next(feed)
        engine.backward(loss_fn(engine(x), y))
        engine.step()

    return harness.time_calls(step, len(batches))


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
    load_start = harness.load_average()
    info = harness.machine_info(("trainmon", "torch", "deepspeed"))
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
    # per round: the block's median ms/step (wall, thread CPU); every step for the quantiles
    per_round: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    per_round_cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    every_step: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    every_cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}

    def block(name: str, _index: int, _recorded: bool) -> None:
        timings = run_block(engines[name], batches)
        walls = [ns / 1e6 for ns in timings.wall_ns]
        cpus = [ns / 1e6 for ns in timings.thread_ns]
        per_round[name].append(statistics.median(walls))
        per_round_cpu[name].append(statistics.median(cpus))
        every_step[name].extend(walls)
        every_cpu[name].extend(cpus)
        if name == "attach" and monitor is not None:
            monitor.flush()

    harness.interleaved_rounds(CONTENDERS, args.rounds, block, rng=random.Random(2))
    if monitor is not None:
        monitor.close()
    model_name = "Linear(16, 10)" if args.tiny else "MLP 256-1024-1024-10"
    print(harness.machine_line(info))
    print(
        f"{model_name}, {args.rounds} rounds x {args.steps} steps, "
        f"load {load_start} -> {harness.load_average()}"
    )
    harness.print_markdown_table(
        ("contender", "median ms/step", "p10", "p90", "thread CPU ms/step"),
        [
            (
                name,
                f"{statistics.median(every_step[name]):.3f}",
                f"{harness.percentile(every_step[name], 0.1):.3f}",
                f"{harness.percentile(every_step[name], 0.9):.3f}",
                f"{statistics.median(every_cpu[name]):.3f}",
            )
            for name in CONTENDERS
        ],
    )
    print()
    rng = random.Random(0)
    lines = []
    for a, b in COMPARISONS:
        wall = harness.paired_overhead(per_round[a], per_round[b], rng, BOOTSTRAP_RESAMPLES)
        cpu = harness.paired_overhead(per_round_cpu[a], per_round_cpu[b], rng, BOOTSTRAP_RESAMPLES)
        lines.append((f"{a} / {b}", harness.percent_ci(*wall), harness.percent_ci(*cpu)))
    harness.print_markdown_table(
        ("comparison", "wall overhead [95% CI]", "thread-CPU overhead [95% CI]"), lines
    )
    if warning := harness.busy_warning(info):
        print(warning)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
