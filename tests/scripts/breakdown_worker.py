"""A torchrun worker: trainmon's engine with a slow rank and different losses per rank.

Usage: breakdown_worker.py OUTDIR. Rank 1's forward sleeps 20 ms per step (a straggler); every
rank writes its own journal (``per_rank_output``) with the breakdown on, and prints one JSON
line with its local loss of each step (read here, after the step, by the worker itself) so the
test can compare ``train/loss`` with the mean over ranks.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

import trainmon

SLOW_RANK = 1
SLOW_S = 0.02
STEPS = 12


class Model(torch.nn.Module):
    """A linear model whose forward sleeps on the slow rank."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)
        self.rank = rank
        self.calls = 0

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.rank == SLOW_RANK and self.calls % 2:  # once per step of two micro-batches
            time.sleep(SLOW_S)
        return torch.nn.functional.mse_loss(self.linear(inputs), targets)


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "steps_per_print": 4,
        "wall_clock_breakdown": True,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "console": {"enabled": False},
        "trainmon": {"per_rank_output": True},
    }
    model = Model(rank)
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    gen = torch.Generator().manual_seed(10 + rank)
    scale = 1.0 + 4.0 * rank  # rank 1's targets are larger: its losses differ from rank 0's
    losses: list[list[float]] = []
    for _ in range(STEPS):
        step_losses = []
        for _ in range(2):
            inputs = torch.randn(4, 8, generator=gen)
            targets = scale * torch.randn(4, 1, generator=gen)
            loss = engine(inputs, targets)
            engine.backward(loss)
            engine.step()
            step_losses.append(float(loss.detach()))
        losses.append(step_losses)
    engine.close()
    print(json.dumps({"rank": rank, "losses": losses}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
