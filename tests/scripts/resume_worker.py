"""A training run with trainmon's engine that saves a checkpoint, then can be killed, and resumed.

Usage: resume_worker.py OUTDIR RUN TOTAL_STEPS SAVE_AT HANG_AT
RUN 1 starts fresh, RUN 2 resumes from the ``latest`` checkpoint in OUTDIR/ckpt. Each step
logs ``test/run`` = RUN, so a reader can tell which run wrote a step. The run saves a checkpoint
after step SAVE_AT (0: never); after step HANG_AT (0: never) it flushes its monitor, prints
``HANGING`` and sleeps, waiting for the test's ``kill -9``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import trainmon


def main() -> None:
    out = Path(sys.argv[1])
    run, total, save_at, hang_at = (int(a) for a in sys.argv[2:6])
    torch.manual_seed(run)
    torch.set_num_threads(1)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "steps_per_print": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": str(out / "csv"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "console": {"enabled": False},
    }
    model = torch.nn.Linear(8, 1)
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    if run > 1:
        path, client = engine.load_checkpoint(str(out / "ckpt"))
        print(f"LOADED {path} {client}", flush=True)
    inputs = torch.randn(4, 8)
    while engine.global_steps < total:
        loss = engine(inputs).pow(2).mean()
        engine.backward(loss)
        engine.step()
        engine.monitor.log({"test/run": run})
        step = engine.global_steps
        if step == save_at:
            engine.save_checkpoint(str(out / "ckpt"), client_state={"run": run, "step": step})
            print(f"SAVED {step}", flush=True)
        if step == hang_at:
            engine.monitor.flush()
            print("HANGING", flush=True)
            time.sleep(600)
    engine.close()


if __name__ == "__main__":
    main()
