"""Process probes that need no optional package: resident memory now and at its peak."""

from __future__ import annotations

import os
import resource
import sys

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux ``/proc``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """Highest resident set size this process has reached, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
