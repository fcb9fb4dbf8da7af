"""``trainmon demo``: the seed's training loop on a small MLP, on the CPU, fully monitored.

It uses :func:`trainmon.initialize` exactly as the seed uses ``deepspeed.initialize``, so
every signal (loss, lr, grad norm, step-time breakdown, throughput, memory) is logged by the
engine itself; the loop adds only an evaluation metric of its own.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainmon.extras import require


def demo_config(output_dir: Path, steps: int, steps_per_print: int) -> dict[str, Any]:
    """The demo's DeepSpeed-style config: TensorBoard, CSV, JSONL and console under one folder."""
    base = output_dir.resolve()
    return {
        "train_batch_size": 64,
        "gradient_accumulation_steps": 2,
        "steps_per_print": steps_per_print,
        "wall_clock_breakdown": True,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {"warmup_num_steps": 20, "total_num_steps": steps, "warmup_max_lr": 3e-3},
        },
        "tensorboard": {"enabled": True, "output_path": str(base), "job_name": "tensorboard"},
        "csv_monitor": {"enabled": True, "output_path": str(base), "job_name": "csv"},
        "jsonl": {"enabled": True, "output_path": str(base.parent), "job_name": base.name},
    }


class _SyntheticRegression:
    """A map-style dataset: y = sin(x · w) + noise, generated on the fly from the index."""

    def __init__(self, size: int, seed: int, features: int = 32) -> None:
        torch = require("torch", "torch", "trainmon demo")
        weights = torch.randn(features, 1, generator=torch.Generator().manual_seed(0))
        weights /= math.sqrt(features)  # the same function for every seed
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, features, generator=generator)
        noise = 0.05 * torch.randn(size, 1, generator=generator)
        self.targets = torch.sin(self.inputs @ weights) + noise

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.inputs[index], self.targets[index]


def run_demo(output_dir: Path, steps: int = 300, steps_per_print: int = 50) -> dict[str, Path]:
    """Train for ``steps`` optimizer steps and return where the outputs are."""
    torch = require("torch", "torch", "trainmon demo")
    import trainmon

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 1),
    )
    config = demo_config(output_dir, steps, steps_per_print)
    data = _SyntheticRegression(64 * steps, seed=1)
    engine, _, loader, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), training_data=data, config=config
    )
    with engine:
        batches = iter(loader)
        while engine.global_steps < steps:
            inputs, targets = next(batches)
            loss = torch.nn.functional.mse_loss(engine(inputs), targets)
            engine.backward(loss)
            engine.step()
        engine.eval()
        with torch.no_grad():
            held_out = _SyntheticRegression(512, seed=2)
            eval_loss = torch.nn.functional.mse_loss(engine(held_out.inputs), held_out.targets)
        engine.monitor.write_events([("eval/loss", eval_loss, engine.global_steps)])
    base = output_dir.resolve()
    return {
        "tensorboard": base / "tensorboard",
        "csv": base / "csv",
        "jsonl": base / "metrics.jsonl",
    }
