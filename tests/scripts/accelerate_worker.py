"""A small MLP trained with Accelerate, logging through trainmon's tracker (one process or
torchrun). Usage: accelerate_worker.py OUT_DIR. Rank 0 writes what it gave
``accelerator.log`` and the tracker's stored configuration to OUT_DIR/accelerate.json."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from trainmon.integrations.accelerate import TrainmonTracker

STEPS = 20
BATCH = 8
STEP_SLEEP_S = 0.01


NAN_AT = 5  # nan=True: the weights turn NaN after this step


def train(out: Path, nan: bool = False) -> dict[str, Any]:
    """Train 20 steps, logging loss and learning rate each step; what was logged. With
    ``nan``, the weights turn NaN after step NAN_AT and a non_finite stop rule watches the
    loss; the loop stops when ``tracker.stop_reason`` says so."""
    torch.manual_seed(0)
    config = {
        "steps_per_print": 5,
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
    }
    if nan:
        rule = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
        config["alerts"] = {"rules": [rule], "sinks": []}
    tracker = TrainmonTracker(config, samples_per_step=BATCH)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny", config={"lr": 0.05, "batch": BATCH})
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(STEPS * BATCH * accelerator.num_processes, 16)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    logged: list[dict[str, Any]] = []
    started = time.perf_counter()
    for step, (inputs, targets) in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(STEP_SLEEP_S)
        values = {"train/loss": loss.item(), "train/lr": 0.05, "note": "text is skipped"}
        accelerator.log(values, step=step)
        logged.append({"step": step, **values})
        if nan and step == NAN_AT:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.fill_(float("nan"))
        if tracker.stop_reason is not None:
            break
    wall_s = time.perf_counter() - started
    accelerator.end_training()
    return {
        "logged": logged,
        "wall_s": wall_s,
        "main": accelerator.is_main_process,
        "init_configuration": tracker.init_configuration,
    }


def main() -> None:
    out = Path(sys.argv[1])
    record = train(out)
    if record["main"]:
        (out / "accelerate.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
