"""A training loop that stalls once, for the stall watchdog tests (run as a subprocess).

Usage: stall_worker.py OUTDIR MODE [RANK]
MODE: "sleep" — 20 quick steps, then the training thread sits 2.5 s in ``time.sleep`` (a C
call) inside :func:`block_in_sleep`, then 10 steps of 20 ms; the rule is ``"seconds": 0.5``.
"event" — the same, blocked in ``threading.Event().wait`` inside :func:`block_on_event`.
"multiple" — 30 steps of 20 ms, then the same sleep; the rule is ``"multiple": 5`` only.
RANK (default 0) is this process's rank in a pretend job of 2 (1 does not write).
Writes the JSONL journal and the alert file sink under OUTDIR/job/; prints the stack file path
of each stall and "done" at the end.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import trainmon

STALL_S = 2.5


def block_in_sleep() -> None:
    """Where the training thread gets stuck: a C call that holds no Python frame of its own."""
    time.sleep(STALL_S)  # the stack file must name this line


def block_on_event() -> None:
    """Stuck waiting for something that never comes (like a collective), then timing out."""
    threading.Event().wait(STALL_S)  # the stack file must name this line


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    os.environ["RANK"] = sys.argv[3] if len(sys.argv) > 3 else "0"
    os.environ["WORLD_SIZE"] = "2"
    rule: dict[str, object] = {"name": "hang", "kind": "stall", "severity": "critical"}
    rule.update({"multiple": 5} if mode == "multiple" else {"seconds": 0.5})
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": out, "job_name": "job"},
        "alerts": {"rules": [rule], "sinks": [{"type": "file"}]},
    }
    step_s = 0.02 if mode == "multiple" else 0.005
    quick_steps = 30 if mode == "multiple" else 20
    with trainmon.Monitor(config) as monitor:
        step = 0
        for _ in range(quick_steps):
            step += 1
            monitor.step = step
            monitor.log({"train/loss": 1.0 / step})
            time.sleep(step_s)
        if mode == "event":
            block_on_event()
        else:
            block_in_sleep()
        for _ in range(10):  # long enough for the watchdog to see the steps resume
            step += 1
            monitor.step = step
            monitor.log({"train/loss": 1.0 / step})
            time.sleep(0.02)
        watchdog = monitor.alerts.watchdog if monitor.alerts is not None else None
        print("median_interval_s", watchdog.median_interval_s if watchdog else None)
    print("done", flush=True)


if __name__ == "__main__":
    main()
