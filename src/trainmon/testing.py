"""Helpers for testing code that uses trainmon: a writer that keeps what it gets in memory.

Use it with ``Monitor(config, writers=[memory])`` (or register it as a custom writer) and
assert on :attr:`MemoryWriter.records` after ``monitor.flush()`` or ``close()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Literal

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, Number, StepScalars
from trainmon.core.writer import RunStatus, Writer

__all__ = ["MemoryWriter", "SlowWriter"]


class MemoryWriter(Writer):
    """Keeps every call in memory. Written on trainmon's background thread: read it after
    ``monitor.flush()`` (or close), which waits for the writers.

    ``records`` holds every per-step record written (window means with ``every="window"``),
    ``flushed`` what had been written at the last flush, ``windows`` the full window statistics,
    ``extras`` histograms/text/hyper-parameters, ``status`` what :meth:`finalize` was told and
    ``closed`` how many times :meth:`close` was called.
    """

    kind = "memory"

    def __init__(self, label: str = "memory", every: Literal["step", "window"] = "step") -> None:
        if every not in ("step", "window"):
            raise ValueError(f"MemoryWriter every={every!r}: expected 'step' or 'window'")
        self.label = label
        self.location = f"memory:{label}"
        self.every = every
        self.records: list[StepScalars] = []
        self.flushed: list[StepScalars] = []
        self.windows: list[WindowStats] = []
        self.extras: list[Extra] = []
        self.status: RunStatus | None = None
        self.closed = 0
        self._lock = threading.Lock()

    def write(self, records: Sequence[StepScalars]) -> None:
        with self._lock:
            self.records.extend(records)

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        with self._lock:
            self.windows.extend(windows)

    def write_extras(self, records: Sequence[Extra]) -> None:
        with self._lock:
            self.extras.extend(records)

    def flush(self) -> None:
        with self._lock:
            self.flushed = list(self.records)

    def finalize(self, status: RunStatus) -> None:
        self.status = status

    def close(self) -> None:
        self.flush()
        self.closed += 1

    def values(self, name: str) -> list[tuple[int, Number]]:
        """``(step, value)`` of every record of metric ``name``, in the order written."""
        with self._lock:
            return [(r.step, r.values[name]) for r in self.records if name in r.values]

    def history(self) -> dict[int, dict[str, Number]]:
        """Every value written, by step then name (a later value of a step wins)."""
        merged: dict[int, dict[str, Number]] = {}
        with self._lock:
            for record in self.records:
                merged.setdefault(record.step, {}).update(record.values)
        return merged


class SlowWriter(Writer):
    """A writer that takes ``seconds`` for every write and flush, as a remote backend on a slow
    network does: for testing (and benchmarking) that a slow backend costs only itself."""

    kind = "custom"

    def __init__(self, seconds: float = 0.05, location: str = "slow") -> None:
        self.seconds = seconds
        self.location = location

    def write(self, records: Sequence[StepScalars]) -> None:
        """Take ``seconds``; keep nothing."""
        time.sleep(self.seconds)

    def flush(self) -> None:
        """Take ``seconds``."""
        time.sleep(self.seconds)

    def close(self) -> None:
        """Nothing to release."""
