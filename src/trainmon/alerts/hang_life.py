"""Signs of life of the ranks behind hang records: when each was last seen, and whether its
process still runs (for :mod:`trainmon.alerts.hang`'s "gone" ranks).

A leaf: imports nothing from trainmon.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["dead_processes", "last_seen", "record_time"]


def record_time(record: Mapping[str, Any]) -> float:
    """When the record was written (0 without a time)."""
    value = record.get("time")
    return float(value) if isinstance(value, int | float) else 0.0


def last_seen(record: Mapping[str, Any]) -> float | None:
    """The record's ``last_seen`` (its rank's latest state in the job's store), if any."""
    value = record.get("last_seen")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _running(pid: int, since: float) -> bool:
    """Whether process ``pid`` of this host still runs and is the one that was running at
    ``since`` (a wall time): on Linux a zombie, or a process started after ``since`` (the pid
    was reused), is not; elsewhere on POSIX, whether the pid exists."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").is_file():
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            boot = next(
                float(line.split()[1])
                for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime ")
            )
            started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        except (OSError, StopIteration, IndexError, ValueError):  # gone, or not readable
            return False
        return fields[0] != "Z" and started <= since + 1.0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def dead_processes(
    records: Mapping[int, Mapping[str, Any]], now: float | None = None, host: str | None = None
) -> dict[int, float]:
    """rank -> seconds since its last sign of life, for the ranks of this host (``host``)
    whose process ended while another rank's process on this host still runs (when every one
    ended, the job is over, not missing a rank). Empty off POSIX, or with no rank here."""
    if os.name != "posix":
        return {}
    now = time.time() if now is None else now
    host = socket.gethostname() if host is None else host
    local = {
        rank: r
        for rank, r in records.items()
        if r.get("host") == host and type(r.get("pid")) is int
    }
    running = {rank for rank, r in local.items() if _running(int(r["pid"]), record_time(r))}
    if not running:
        return {}
    return {
        rank: now - (last_seen(r) or record_time(r))
        for rank, r in local.items()
        if rank not in running
    }
