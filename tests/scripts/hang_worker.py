"""torchrun entry for ``tests/alerts/test_hang.py`` and ``test_hang_nodes.py``: two gloo ranks
that hang on purpose (one torchrun agent, or two "nodes" that share no folder).

argv: ``outdir`` (each node's own under two agents), then ``--stay`` or nothing. Each rank runs
a Monitor (JSONL journal and alert file under ``outdir/job``, a ``stall`` rule of 1 s) with
trainmon's comms instrumentation, and one ``all_reduce`` per step. At step 4 rank 1 first sits
in :func:`slow_data_loader` (a long sleep) while rank 0 goes on into the step's ``all_reduce``
and waits there: the hang the test diagnoses, then kills. With ``--stay``, a rank whose
collective fails because its peer's process died (gloo notices at once) stays where it is, as
a rank inside an NCCL collective does until the collective's timeout (:func:`stuck_as_nccl`).
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

import trainmon
from trainmon.collect.comms import CommsLogger

HANG_AT_STEP = 4


def slow_data_loader() -> None:
    """Where rank 1 is stuck: a C call (sleep) with no Python frame of its own."""
    time.sleep(600)  # the verdict must name this function and this line


def stuck_as_nccl() -> None:
    """Where rank 0 stays after its peer died under ``--stay``: the process lives on, steps
    no more, and its watchdog keeps refreshing its signs of life."""
    threading.Event().wait(600)


def main() -> None:
    out = sys.argv[1]
    stay = "--stay" in sys.argv[2:]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    # torchrun puts its workers in sessions of their own: the test ends them by pid
    (Path(out) / f"pid-rank{rank}.txt").write_text(str(os.getpid()))
    config = {
        "steps_per_print": 2,
        "console": {"enabled": False},
        "system_metrics": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "alerts": {
            "rules": [{"name": "hang", "kind": "stall", "seconds": 1.0}],
            "sinks": [{"type": "file"}],
        },
    }
    monitor = trainmon.Monitor(config, all_ranks_log=True)
    comms = CommsLogger(monitor.config.comms_logger, monitor, record_stats=False)
    comms.install()
    for step in range(1, 100):
        if step == HANG_AT_STEP and rank == 1:
            slow_data_loader()
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError:
            if not stay:
                raise
            stuck_as_nccl()
        comms.take_step_comm_ms()
        monitor.step = step
        monitor.log({"train/loss": 1.0 / step})
        time.sleep(0.05)
    print("not reached", flush=True)


if __name__ == "__main__":
    main()
