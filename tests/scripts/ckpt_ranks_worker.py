"""A torchrun worker for checkpoints across ranks with trainmon's engine.

Usage: ckpt_ranks_worker.py OUTDIR MODE
* ``save``: train 3 steps, save, train 2 more, load: prints ``RESULT {json}`` per rank with
  whether the weights are the saved ones again and the step counters.
* ``stop``: a stop rule on ``train/loss`` (evaluated on rank 0 only); step 3 has a NaN loss on
  every rank; then every rank saves: prints ``RESULT {json}`` saying whether the save raised
  ``TrainingStopped``.

After ``destroy_process_group()`` each rank prints ``THREADS {json}``: its threads' names.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import trainmon


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = dist.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 100,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "console": {"enabled": False},
        # no cross-rank statistics: their gloo group is not what is tested here
        "trainmon": {"cross_rank": "off"},
        "alerts": {
            "rules": [
                {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
            ],
            "sinks": [],
        },
    }
    model = torch.nn.Linear(4, 1)
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    inputs = torch.randn(2, 4) + rank
    result: dict[str, object] = {"rank": rank}

    def train(steps: int, nan_at: int = 0) -> None:
        for _ in range(steps):
            x = inputs * math.nan if engine.global_steps + 1 == nan_at else inputs
            loss = engine(x).pow(2).mean()
            engine.backward(loss)
            engine.step()

    if mode == "save":
        train(3)
        engine.save_checkpoint(str(out / "ckpt"))
        saved = [p.detach().clone() for p in engine.module.parameters()]
        train(2)
        path, client = engine.load_checkpoint(str(out / "ckpt"))
        result["equal"] = all(
            torch.equal(a, b) for a, b in zip(saved, engine.module.parameters(), strict=True)
        )
        result["steps"] = [engine.global_steps, engine.monitor.step]
        result["path"] = path
        result["client"] = client
    else:
        try:
            train(3, nan_at=3)
        except trainmon.TrainingStopped:
            result["stopped_in_step"] = True
        try:
            engine.save_checkpoint(str(out / "ckpt"))
            result["save"] = "saved"
        except trainmon.TrainingStopped as exc:
            result["save"] = "stopped"
            result["reason"] = exc.reason
    print("RESULT " + json.dumps(result), flush=True)
    engine.close()
    dist.destroy_process_group()
    # gloo's threads still running now mean the group outlived destroy_process_group: its
    # teardown then happens at interpreter exit, where it could abort the process
    print("THREADS " + json.dumps({"rank": rank, "after_destroy": native_threads()}), flush=True)


def native_threads() -> list[str] | None:
    """The names of this process's threads, C++ ones included (None where /proc is absent)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    names = []
    for task in sorted(tasks.iterdir()):
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return names


if __name__ == "__main__":
    main()
