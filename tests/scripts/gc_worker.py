"""Garbage collections on the training thread: a tiny DeepSpeed engine's steps, bare and under
``trainmon.attach``; prints one JSON line.

Usage: gc_worker.py OUTDIR STEPS. A fresh interpreter, so that what an earlier test left in the
collector's generations is not counted. Counts each generation's collections that ran on the
main thread over STEPS steps, after a warm-up and a full collection.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import single_rank

single_rank.set_env()  # before deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402

WARMUP = 50


def count_collections(step: Callable[[], None], steps: int) -> dict[str, int]:
    """Collections per generation on this thread over ``steps`` calls of ``step``."""
    for _ in range(WARMUP):
        step()
    gc.collect()
    counts: Counter[str] = Counter()
    main = threading.main_thread()

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and threading.current_thread() is main:
            counts[str(info["generation"])] += 1

    gc.callbacks.append(seen)
    try:
        for _ in range(steps):
            step()
    finally:
        gc.callbacks.remove(seen)
    return dict(counts)


def one_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 16, generator=gen)


def deepspeed_engine() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    config = {
        "train_batch_size": 8,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 0},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    return engine


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    x, y = one_batch()
    engine = deepspeed_engine()

    def ds_step() -> None:
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()

    config: dict[str, Any] = {
        "console": {"enabled": False},
        "wall_clock_breakdown": True,
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "attach"},
    }
    result = {"deepspeed_bare": count_collections(ds_step, steps)}
    monitor = trainmon.attach(engine, config)
    result["deepspeed_attach"] = count_collections(ds_step, steps)
    monitor.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
