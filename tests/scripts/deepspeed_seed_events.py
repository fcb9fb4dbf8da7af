"""The seed's own ``engine.monitor.write_events`` calls after ``trainmon.attach`` (one process).

Usage: deepspeed_seed_events.py OUTDIR. Trains 4 steps of a tiny ZeRO-0 engine with DeepSpeed's
TensorBoard on and ``comms_logger`` off, and after each step writes the seed's ``(name, value)``
pairs and a DeepSpeed-style ``("train/loss", value, global_samples)`` triple.
"""

from __future__ import annotations

import sys
from pathlib import Path

import single_rank

single_rank.set_env()  # before deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402
from trainmon.integrations.deepspeed import detach  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 1e-2}},
        "tensorboard": {"enabled": True, "output_path": str(out), "job_name": "tb"},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), config=config
    )
    trainmon.attach(engine, {"console": {"enabled": False}})
    for _ in range(4):
        loss = engine(torch.randn(4, 8)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        lr = engine.get_lr()[0]
        engine.monitor.write_events(
            [
                ("train/loss", loss.item()),
                ("train/lr", lr),
                ("train/grad_norm", engine.get_global_grad_norm()),
                ("user/pair_metric", 7.0),
            ]
        )
        engine.monitor.write_events([("train/loss", loss.item(), engine.global_samples)])
        engine.monitor.write_events([("user/by_samples", 1.5, engine.global_samples)])
    detach(engine)


if __name__ == "__main__":
    main()
