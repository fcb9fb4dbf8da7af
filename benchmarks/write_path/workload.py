"""The logging workload every write-path benchmark runs: 8 scalars a step, from fixed rows.

Why one module: the ratios in the tables only mean something if every contender logs the same
names and values the same way; ``measure`` is the one clock a sample of any contender is taken
with (calling-thread CPU and wall inside the loop, then the rest of the process, child
processes included, until the contender is closed).
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness

NAMES: tuple[str, ...] = (
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "train/loss_scale",
    "perf/step_time_ms",
    "perf/tokens_per_s",
    "perf/samples_per_s",
    "mem/allocated_gb",
)
PER_STEP = len(NAMES)
ROWS_MASK = 1023  # value rows are reused cyclically: rows[step & ROWS_MASK]
INFO_MODULES = ("trainmon", "torch", "tensorboard", "tensorboardX", "wandb")
DEFAULT_QUEUE_SIZE = 200_000


class Unavailable(Exception):
    """A contender that cannot run on this machine (reported, not fatal)."""


@dataclass
class Sample:
    """One timed repeat of one contender (times in ns, totals over ``scalars``)."""

    scalars: int
    call_cpu_ns: int  # calling thread CPU during the logging loop
    call_wall_ns: int  # wall time of the logging loop
    finish_cpu_ns: int  # calling thread CPU in flush/close after the loop
    finish_wall_ns: int  # wall time of flush/close after the loop
    background_ns: int  # process + children CPU minus calling-thread CPU, start to closed
    children_ns: int = 0  # the part of background_ns spent in child processes
    dropped: int = 0


def float_rows() -> list[tuple[float, ...]]:
    """1024 rows of 8 plausible float metrics, deterministic."""
    rng = random.Random(0)
    rows: list[tuple[float, ...]] = []
    for i in range(ROWS_MASK + 1):
        rows.append(
            (
                2.5 * (0.999**i) + rng.random() * 0.01,  # loss
                3e-4 * min(1.0, i / 100),  # lr
                1.0 + rng.random(),  # grad norm
                65536.0,  # loss scale
                120.0 + rng.random() * 5,  # step time ms
                8.0e4 + rng.random() * 1e3,  # tokens/s
                40.0 + rng.random(),  # samples/s
                17.25 + rng.random() * 0.1,  # GB
            )
        )
    return rows


def tensor_rows() -> list[tuple[Any, ...]]:
    """The same rows as 0-d float32 CPU tensors (what ``loss.detach()`` looks like)."""
    import torch

    return [tuple(torch.tensor(v, dtype=torch.float32) for v in row) for row in float_rows()]


def trainmon_config(folder: Path, writers: Sequence[str], queue_size: int) -> dict[str, Any]:
    """A Monitor config with ``writers`` (config sections) writing under ``folder``, console off."""
    config: dict[str, Any] = {
        "console": {"enabled": False},
        "trainmon": {"queue_size": queue_size, "flush_interval_s": 1.0},
    }
    for section in writers:
        config[section] = {"enabled": True, "output_path": str(folder), "job_name": "bench"}
    return config


def measure(scalars: int, loop: Callable[[], None], finish: Callable[[], int]) -> Sample:
    """Time ``loop`` on this thread, then ``finish`` (flush/close, returns dropped events).

    Background CPU is taken after ``finish`` returned, so work a writer thread or service
    process did for these scalars is included.
    """
    gc.collect()
    c0 = harness.children_cpu_ns()
    p0 = time.process_time_ns()
    t0 = time.thread_time_ns()
    w0 = time.perf_counter_ns()
    loop()
    t1 = time.thread_time_ns()
    w1 = time.perf_counter_ns()
    dropped = finish()
    t2 = time.thread_time_ns()
    w2 = time.perf_counter_ns()
    p2 = time.process_time_ns()
    c2 = harness.children_cpu_ns()
    return Sample(
        scalars=scalars,
        call_cpu_ns=t1 - t0,
        call_wall_ns=w1 - w0,
        finish_cpu_ns=t2 - t1,
        finish_wall_ns=w2 - w1,
        background_ns=max(0, (p2 - p0) - (t2 - t0)) + (c2 - c0),
        children_ns=c2 - c0,
        dropped=dropped,
    )
