"""A torchrun worker: trainmon's engine with steps of uneven length, timed by the worker itself.

Usage: rates_worker.py OUTDIR. Every rank's forward sleeps 10 ms and 190 ms in turn, with 16
samples per step and rank; each rank prints one JSON line with its loop's start and the end of
each step (``time.perf_counter``), so the test can count samples over the wall time.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

import trainmon

SLEEPS_S = (0.19, 0.01)
SAMPLES_PER_STEP = 16
STEPS = 20


class SleepyModel(torch.nn.Module):
    """A linear model whose forward sleeps 10 ms and 190 ms in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(SLEEPS_S[self.calls % 2])
        return self.linear(inputs).pow(2).mean()


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = dist.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": SAMPLES_PER_STEP,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "console": {"enabled": True},
    }
    model = SleepyModel()
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    inputs = torch.randn(SAMPLES_PER_STEP, 4)
    dist.barrier()
    ends = []
    start = time.perf_counter()
    for _ in range(STEPS):
        loss = engine(inputs)
        engine.backward(loss)
        engine.step()
        ends.append(time.perf_counter())
    engine.close()
    print(json.dumps({"rank": rank, "start": start, "ends": ends}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
