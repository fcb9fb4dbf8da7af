"""``trainmon demo``: a small MLP trained on synthetic data on the CPU, fully monitored."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from trainmon.extras import require
from trainmon.meters import peak_rss_mb, rss_mb
from trainmon.monitor import Monitor


def demo_config(output_dir: Path, steps_per_print: int) -> dict[str, Any]:
    """The demo's DeepSpeed-style config: TensorBoard, CSV, JSONL and console under one folder."""
    base = output_dir.resolve()
    return {
        "train_batch_size": 64,
        "steps_per_print": steps_per_print,
        "tensorboard": {"enabled": True, "output_path": str(base), "job_name": "tensorboard"},
        "csv_monitor": {"enabled": True, "output_path": str(base), "job_name": "csv"},
        "jsonl": {"enabled": True, "output_path": str(base.parent), "job_name": base.name},
    }


def run_demo(output_dir: Path, steps: int = 300, steps_per_print: int = 50) -> dict[str, Path]:
    """Train, log ``train/``, ``perf/`` and ``mem/`` metrics, and return where the outputs are."""
    torch = require("torch", "torch", "trainmon demo")
    torch.manual_seed(0)
    batch_size = 64
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 1),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    true_weights = torch.randn(32, 1) / math.sqrt(32)
    config = demo_config(output_dir, steps_per_print)
    with Monitor(config) as monitor:
        for step in range(1, steps + 1):
            started = time.perf_counter()
            inputs = torch.randn(batch_size, 32)
            targets = torch.sin(inputs @ true_weights) + 0.05 * torch.randn(batch_size, 1)
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            elapsed = time.perf_counter() - started
            monitor.step = step
            # Tensors go in as they are: trainmon reads them in the background.
            monitor.write_events(
                [
                    ("train/loss", loss.detach()),
                    ("train/grad_norm", grad_norm),
                    ("train/lr", scheduler.get_last_lr()[0]),
                    ("perf/step_time_ms", elapsed * 1e3),
                    ("perf/samples_per_sec", batch_size / elapsed),
                ]
            )
            if step % steps_per_print == 0 or step == 1:
                monitor.write_events([("mem/rss_mb", rss_mb()), ("mem/peak_rss_mb", peak_rss_mb())])
        monitor.write_events([("eval/final_loss", loss.detach(), steps)])
    base = output_dir.resolve()
    return {
        "tensorboard": base / "tensorboard",
        "csv": base / "csv",
        "jsonl": base / "metrics.jsonl",
    }
