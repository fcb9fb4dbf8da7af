"""A torchrun worker: two ranks under trainmon's engine that save, run past the checkpoint and
die, then resume from it.

Usage: resume_ranks_worker.py OUTDIR RUN [SAVE_AT]. Every rank's forward sleeps 20 ms, with 16
samples per step and rank; each rank writes its own journal and TensorBoard folder
(``per_rank_output``), rank 0 the cross-rank statistics (``perf/job_samples_per_sec``). RUN 1
saves after step SAVE_AT (default 8), trains to step DIE_AT, flushes and ends its process without
closing anything (as a killed job does). RUN 2 loads the checkpoint and trains to step TOTAL.
Each rank prints one JSON line with its loop's start and each step's end (``perf_counter``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import trainmon

SLEEP_S = 0.02
SAMPLES_PER_STEP = 16
DIE_AT, TOTAL = 14, 24


class SleepyModel(torch.nn.Module):
    """A linear model whose forward sleeps: steps of a known length."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return self.linear(inputs).pow(2).mean()


def main() -> None:
    out, run = Path(sys.argv[1]), int(sys.argv[2])
    save_at = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = dist.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": SAMPLES_PER_STEP,
        "steps_per_print": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "console": {"enabled": False},
        "system_metrics": {"enabled": False},
        "trainmon": {"per_rank_output": True, "cross_rank": "on"},
    }
    model = SleepyModel()
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    if run > 1:
        engine.load_checkpoint(str(out / "ckpt"))
    inputs = torch.randn(SAMPLES_PER_STEP, 4)
    dist.barrier()
    ends = []
    start = time.perf_counter()
    last = DIE_AT if run == 1 else TOTAL
    while engine.global_steps < last:
        engine.backward(engine(inputs))
        engine.step()
        ends.append(time.perf_counter())
        if run == 1 and engine.global_steps == save_at:
            engine.save_checkpoint(str(out / "ckpt"))
    report = {"rank": rank, "run": run, "start": start, "ends": ends}
    if run == 1:
        engine.monitor.flush()
        print(json.dumps(report), flush=True)
        dist.barrier()
        os._exit(0)  # killed past its checkpoint: no close, no end record
    engine.close()
    print(json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
