"""The DeepSpeed benchmarks' contenders: one model, one DeepSpeed config, and what each
contender changes (DeepSpeed's own monitor, ``trainmon.attach`` and its parts).

Why here: ``bench_deepspeed.py`` (a process per contender) and ``bench_attach.py`` (one engine,
attached and detached block by block) must measure the same steps.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BATCH = 32
WIDTH = 512
LAYERS = 4
TINY = 16
BOOTSTRAP_RESAMPLES = 2000
DEFAULT_SWITCH_S = 0.005  # Python's default sys.getswitchinterval()
WRITERS = ("tensorboard", "csv", "journal")
BLOCK_BATCHES = 20  # distinct batches, used in turn
TMPFS = Path("/dev/shm")  # where a ``tmpfs`` contender's writers write (Linux)


@dataclass(frozen=True)
class Contender:
    """One way of running the same training steps."""

    name: str
    what: str
    attach: bool = False
    writers: tuple[str, ...] = ()  # "tensorboard", "csv", "journal"
    breakdown: bool = False
    ds_monitor: bool = False  # DeepSpeed's own TensorBoard + CSV + wall_clock_breakdown
    clipping: float | None = None  # None: DeepSpeed's default (1.0)
    trainmon: dict[str, Any] = field(default_factory=dict)  # the "trainmon" section
    threads: bool = True  # the system sampler and the profiler listener
    switch_s: float = DEFAULT_SWITCH_S
    baseline: str = "bare"
    tmpfs: bool = False  # the writers' files in memory (TMPFS), not on the disk


CONTENDERS: tuple[Contender, ...] = (
    Contender("bare", "DeepSpeed alone"),
    Contender("bare-twin", "bare again, in its own process: the A/A control"),
    Contender("ds", "DeepSpeed's own TB + CSV + breakdown", ds_monitor=True),
    Contender(
        "attach",
        "attach: TB + CSV + journal + breakdown (everything)",
        attach=True,
        writers=WRITERS,
        breakdown=True,
    ),
    Contender("attach-nothing", "attach: writers and breakdown off", attach=True),
    Contender(
        "attach-no-threads",
        "attach: writers, breakdown, sampler, profiler off",
        attach=True,
        threads=False,
    ),
    Contender(
        "attach-writers", "attach: TB + CSV + journal, no breakdown", attach=True, writers=WRITERS
    ),
    Contender("attach-breakdown", "attach: breakdown, no writer", attach=True, breakdown=True),
    Contender("attach-tb", "attach: TensorBoard only", attach=True, writers=("tensorboard",)),
    Contender("attach-csv", "attach: CSV only", attach=True, writers=("csv",)),
    Contender("attach-journal", "attach: journal only", attach=True, writers=("journal",)),
    Contender(
        "attach@tmpfs",
        "attach everything, its files on a tmpfs: the disk left out",
        attach=True,
        writers=WRITERS,
        breakdown=True,
        tmpfs=True,
    ),
    Contender(
        "attach@drain0.25s",
        "attach everything, drained every 0.25 s (the default before 1 s)",
        attach=True,
        writers=WRITERS,
        breakdown=True,
        trainmon={"drain_interval_s": 0.25},
    ),
    Contender("bare-noclip", "DeepSpeed alone, gradient_clipping 0", clipping=0.0),
    Contender(
        "attach-noclip",
        "attach, nothing on, clipping 0: trainmon's grad norm every step",
        attach=True,
        clipping=0.0,
        baseline="bare-noclip",
    ),
    Contender(
        "attach-noclip-nonorm",
        "the same with trainmon.grad_norm_every 0",
        attach=True,
        clipping=0.0,
        trainmon={"grad_norm_every": 0},
        baseline="bare-noclip",
    ),
    Contender("bare@si0.5ms", "bare, sys.setswitchinterval(0.5 ms)", switch_s=0.0005),
    Contender(
        "attach@si0.5ms",
        "attach everything, switch interval 0.5 ms",
        attach=True,
        writers=WRITERS,
        breakdown=True,
        switch_s=0.0005,
        baseline="bare@si0.5ms",
    ),
)
BY_NAME = {c.name: c for c in CONTENDERS}
#: Extra comparisons besides each contender against its baseline.
EXTRA_COMPARISONS = (("attach", "ds"), ("attach-noclip", "attach-noclip-nonorm"))


def ds_config(contender: Contender, out: Path, batch: int = BATCH) -> dict[str, Any]:
    """The DeepSpeed config the engine is built with (DeepSpeed's own monitor sections here)."""
    config: dict[str, Any] = {
        "train_batch_size": batch,
        "steps_per_print": 10,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 0},
    }
    if contender.clipping is not None:
        config["gradient_clipping"] = contender.clipping
    job = {"output_path": str(out), "job_name": contender.name}
    if contender.ds_monitor:
        config["wall_clock_breakdown"] = True
        config["tensorboard"] = {"enabled": True, **job}
        config["csv_monitor"] = {"enabled": True, **job}
    return config


def writers_folder(contender: Contender, out: Path) -> Path:
    """A fresh folder for the contender's files: below ``out``, or on the tmpfs; the caller
    removes it."""
    if contender.tmpfs and not TMPFS.is_dir():
        raise SystemExit(f"{contender.name}: {TMPFS} (a tmpfs) does not exist here")
    out.mkdir(parents=True, exist_ok=True)
    return Path(
        tempfile.mkdtemp(prefix=contender.name + "-", dir=TMPFS if contender.tmpfs else out)
    )


def attach_config(contender: Contender, out: Path) -> dict[str, Any]:
    """What ``trainmon.attach`` is given, merged over the engine's config."""
    job = {"output_path": str(out), "job_name": contender.name}
    config: dict[str, Any] = {
        "console": {"enabled": False},
        "wall_clock_breakdown": contender.breakdown,
        "tensorboard": {"enabled": "tensorboard" in contender.writers, **job},
        "csv_monitor": {
            "enabled": "csv" in contender.writers,
            "output_path": str(out),
            "job_name": contender.name + "-csv",
        },
        "jsonl": {"enabled": "journal" in contender.writers, **job},
    }
    if contender.trainmon:
        config["trainmon"] = dict(contender.trainmon)
    if not contender.threads:
        config["system_metrics"] = {"enabled": False}
        config["profiler"] = {"enabled": False}
    return config


def model_label(tiny: bool, width: int = WIDTH) -> str:
    """The model as the tables name it."""
    return f"Linear({TINY}, {TINY})" if tiny else f"MLP {LAYERS} x Linear({width}, {width})"


def build_model(tiny: bool, width: int = WIDTH) -> Any:
    import torch

    torch.manual_seed(0)
    if tiny:
        return torch.nn.Linear(TINY, TINY)
    layers: list[Any] = []
    for index in range(LAYERS):
        layers.append(torch.nn.Linear(width, width))
        if index < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def one_rank_engine(
    contender: Contender,
    out: Path,
    tiny: bool,
    device: str = "cpu",
    width: int = WIDTH,
    batch: int = BATCH,
) -> tuple[Any, list[Any]]:
    """A DeepSpeed engine on one rank of its own (gloo on the CPU, NCCL on ``device="cuda"``;
    a free port: several run side by side), one training thread, and a block's worth of fixed
    batches (``BLOCK_BATCHES``) on the device."""
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        os.environ[key] = value
    os.environ["WORLD_SIZE"] = "1"
    os.environ.setdefault("DS_ACCELERATOR", device)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    import deepspeed
    import torch

    torch.set_num_threads(1)
    sys.setswitchinterval(contender.switch_s)
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
    model = build_model(tiny, width)
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config(contender, out, batch)
    )
    gen = torch.Generator().manual_seed(1)
    width = TINY if tiny else width
    batches = [
        (
            torch.randn(batch, width, generator=gen).to(device),
            torch.randn(batch, width, generator=gen).to(device),
        )
        for _ in range(BLOCK_BATCHES)
    ]
    return engine, batches


def train_step(engine: Any, batch: tuple[Any, Any]) -> None:
    """One training step: forward, MSE loss, backward, optimizer step."""
    import torch

    x, y = batch
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()


def time_block(
    engine: Any, batches: list[Any], monitor: Any, sync: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """One timed block: a step per batch (wall and thread CPU each), then ``sync()`` (on a GPU:
    the steps' device work; the host runs ahead of it) and ``monitor.flush()`` (when there is a
    monitor), all of it timed, and the process's CPU over the whole; and the garbage
    collections the training thread ran in the steps (a queue that keeps objects made on the
    training thread makes it collect more often)."""
    perf, thread_cpu, process_cpu = (
        time.perf_counter_ns,
        time.thread_time_ns,
        time.process_time_ns,
    )
    walls, cpus = [], []
    collections = [0]
    training_thread = threading.current_thread()

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and threading.current_thread() is training_thread:
            collections[0] += 1

    gc.callbacks.append(count)
    p0 = process_cpu()
    try:
        for batch in batches:
            c0, w0 = thread_cpu(), perf()
            train_step(engine, batch)
            w1, c1 = perf(), thread_cpu()
            walls.append(w1 - w0)
            cpus.append(c1 - c0)
    finally:
        gc.callbacks.remove(count)
    backlog = monitor.pending_events if monitor is not None else 0
    c0, w0 = thread_cpu(), perf()
    if sync is not None:
        sync()
    if monitor is not None:
        monitor.flush()
    w1, c1 = perf(), thread_cpu()
    p1 = process_cpu()
    return {
        "wall_ns": walls,
        "thread_ns": cpus,
        "flush_wall_ns": w1 - w0,
        "flush_thread_ns": c1 - c0,
        "process_ns": p1 - p0,
        "backlog": backlog,
        "collections": collections[0],
    }
