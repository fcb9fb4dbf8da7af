"""A training loop that gets profiled on demand (``tests/collect/test_profiler.py``).

argv: ``outdir``. Alone, or under torchrun (gloo, one ``all_reduce`` per step, so the ranks
step together). Prints ``{"ready": pid, "rank": r}`` at step 10 for the test to signal, then
steps (about 15 ms each) until every rank has written its trace or step 600.
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


def main() -> None:
    out = Path(sys.argv[1])
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    world = dist.get_world_size() if distributed else 1
    config = {
        "console": {"enabled": False},
        "system_metrics": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "profiler": {"steps": 3},
    }
    profiles = out / "job" / "profiles"
    with trainmon.Monitor(config) as monitor:
        a = torch.randn(32, 32)
        for step in range(1, 600):
            for _ in range(5):
                a = torch.mm(a, a).tanh()
            done = torch.tensor([float(len(list(profiles.glob("*.json.gz"))) >= world)])
            if distributed:
                dist.all_reduce(done, op=dist.ReduceOp.MIN)
            monitor.step = step
            monitor.log({"train/loss": float(a.sum())})
            if step == 10:
                print(json.dumps({"ready": os.getpid(), "rank": monitor.place.rank}), flush=True)
            if done.item() > 0:
                break
            time.sleep(0.01)
    if distributed:
        dist.destroy_process_group()
    print(json.dumps({"steps": step}), flush=True)


if __name__ == "__main__":
    main()
