"""torchrun entry for ``tests/collect/test_node_sys.py``: one rank per "node" (two torchrun
agents, each in its own folder), system metrics on, statistics across ranks on.

argv: ``outdir`` (each node's own). Every rank writes its own journal (``per_rank_output``) so
the test can recompute each node's figures; rank 0's windows also hold the cross-rank and
across-node ones. The rank on node 1 keeps a core busy 30 ms a step, the rank on node 0 sleeps
as long: node 1 is the node with the most process CPU.
"""

from __future__ import annotations

import os
import sys
import time

import torch.distributed as dist

import trainmon


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    busy = os.environ.get("GROUP_RANK") == "1"
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "system_metrics": {"enabled": True, "interval_s": 0.05},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "trainmon": {"per_rank_output": True, "cross_rank": "on"},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 41):
            monitor.step = step
            monitor.log({"train/loss": 1.0 / step})
            until = time.monotonic() + 0.03
            if busy:
                while time.monotonic() < until:  # one core busy
                    pass
            else:
                time.sleep(0.03)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
