"""A torchrun worker training a tiny model with trainmon's engine; one rank can be a straggler.

Usage: engine_worker.py OUTDIR SLOW_RANK   (SLOW_RANK -1: none). The slow rank sleeps 50 ms
per step outside the engine, as a slow data loader would.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

import trainmon


def main() -> None:
    out, slow_rank = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = dist.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10,
        "wall_clock_breakdown": True,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "console": {"enabled": True},
    }
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    inputs = torch.randn(4, 16)
    for _ in range(30):
        if rank == slow_rank:
            time.sleep(0.05)
        loss = engine(inputs).pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
