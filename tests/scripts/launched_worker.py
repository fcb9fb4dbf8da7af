"""A torchrun worker for the goodput clock: prints ``PROCESS <unix s>`` at once, then one
Monitor (a JSONL journal in OUTDIR, rank 0 only) logs a few timed steps.

Usage: torchrun ... launched_worker.py OUTDIR
"""

from __future__ import annotations

import sys
import time

print(f"PROCESS {time.time()}", flush=True)

import trainmon  # noqa: E402  (after the print: the import is part of the start-up)


def main() -> None:
    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": sys.argv[1], "job_name": "job"},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 6):
            time.sleep(0.02)
            monitor.log({"perf/step_time_ms": 20.0}, step=step)


if __name__ == "__main__":
    main()
