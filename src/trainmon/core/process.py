"""When this process's part of the job began: its own start, and its launcher's.

Goodput counts every second of a job from the process's start, not from the Monitor's
creation: importing torch, building the model, NCCL's set-up and loading shards come before
any Monitor exists, and are the start-up badput users most need to see. The OS knows when
each process began (psutil's ``create_time``); under ``torchrun`` the elastic agent's own start
counts too, for the first round of workers (``TORCHELASTIC_RESTART_COUNT`` 0): its start-up
(imports, rendezvous) is the job's.

A process that hosts several runs one after another (a notebook, a sweep, a test session)
marks where each begins with :func:`mark_start`; the start is claimed once, by the first
journal opened after the process's start or the mark, so later runs of the same process
start at their Monitor.
"""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_claimed = False
_mark: float | None = None


def mark_start(when: float | None = None) -> None:
    """Start the next run's clock here (unix seconds ``when``, default now) instead of at the
    process's start: for a process that hosts several runs, such as a notebook or a sweep."""
    global _claimed, _mark
    with _lock:
        _mark = time.time() if when is None else float(when)
        _claimed = False


def claim_starts() -> dict[str, float]:
    """The starts the first journal after the process's start (or :func:`mark_start`) records
    in its ``meta`` line; empty for every later one."""
    global _claimed
    with _lock:
        if _claimed:
            return {}
        _claimed = True
        if _mark is not None:
            return {"job_start": _mark}
    return process_starts()


def process_starts() -> dict[str, float]:
    """``{"process_start": t}`` and, when this process is a first-round ``torchrun`` worker,
    ``{"launcher_start": t}`` (unix seconds); empty where the OS does not tell."""
    found: dict[str, float] = {}
    start = started_at(os.getpid())
    if start is not None:
        found["process_start"] = start
    if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
        launcher = started_at(os.getppid())
        if launcher is not None:
            found["launcher_start"] = launcher
    return found


def started_at(pid: int) -> float | None:
    """When process ``pid`` started (unix seconds), to about 10 ms; None when unknown.

    On Linux it is the process's age (``/proc/uptime`` less its start in clock ticks) taken
    from now: psutil's ``create_time`` adds the start to the boot time, which ``/proc/stat``
    gives in whole seconds, so it may be up to a second early. Elsewhere psutil's figure.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])  # field 22: starttime
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # no psutil, no such process, no permission: unknown
        return None
