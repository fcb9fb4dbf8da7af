"""When a collective's latency is only known later: async CPU work and CUDA events.

Why apart: the training thread stores a timing object and moves on; the background thread
reads it (waiting, if it must) when the step's ``perf/comm_ms`` and ``comm/*`` values resolve.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Protocol

from trainmon.collect.comm_stats import gbps, volume_factors
from trainmon.core.values import Deferred

_TIMING_WAIT_S = 60.0  # longest the background thread waits for an async op to finish


class Timing(Protocol):
    """A latency that may not be known yet."""

    def ready(self) -> bool: ...

    def elapsed_ms(self) -> float | None: ...


class HostAsyncTiming:
    """An ``async_op=True`` CPU collective: the clock is read when its future completes."""

    __slots__ = ("end", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.end: float | None = None

    def done(self, future: Any) -> None:
        """Future done-callback (runs on the backend's thread, or inline if already done)."""
        self.end = time.perf_counter()

    def ready(self) -> bool:
        """True once the collective has finished (reading it will not wait)."""
        return self.end is not None

    def elapsed_ms(self) -> float | None:
        """Wait (background thread) until the collective has finished; None if it never does."""
        deadline = time.monotonic() + _TIMING_WAIT_S
        while self.end is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)
        return max(0.0, (self.end - self.start) * 1e3)


class DeviceTiming:
    """A CUDA collective: two timing events on the stream; read in the background."""

    __slots__ = ("device", "end", "recorded", "start")

    def __init__(self, start: Any, end: Any, device: Any, recorded: bool) -> None:
        self.start = start
        self.end = end
        self.device = device
        self.recorded = recorded

    def done(self, future: Any) -> None:
        """Future done-callback: torch runs it with current streams that wait for the
        collective's kernels (``Future.then`` docs), so the end event lands after them."""
        import torch

        self.end.record(torch.cuda.current_stream(self.device))
        self.recorded = True

    def ready(self) -> bool:
        """True once the end event has been recorded and reached by the device."""
        return self.recorded and bool(self.end.query())

    def elapsed_ms(self) -> float | None:
        """Synchronise the end event (background thread only) and read the elapsed time."""
        deadline = time.monotonic() + _TIMING_WAIT_S
        while not self.recorded:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)
        self.end.synchronize()
        return max(0.0, float(self.start.elapsed_time(self.end)))


# A record: (op, message bytes, group size, latency ms or a Timing, caller function or None).
CommRecord = tuple[str, int, int, Any, str | None]


def latency_of(value: float | Timing) -> float | None:
    """The latency in ms, waiting for it if it is not known yet (None: never known)."""
    if isinstance(value, float):
        return value
    return value.elapsed_ms()


def is_ready(value: float | Timing) -> bool:
    """True when reading the latency will not wait."""
    return isinstance(value, float) or value.ready()


class StepBatch:
    """The collectives of one step, handed from the training thread to whoever reads them."""

    __slots__ = ("_latencies", "_lock", "_summary", "fold_from", "records")

    def __init__(self, records: list[CommRecord], fold_from: int) -> None:
        self.records = records
        self.fold_from = fold_from  # records before this index were folded by an early stats()
        self._latencies: list[float | None] | None = None
        self._summary: dict[str, tuple[int, int, float, float]] | None = None
        self._lock = threading.Lock()

    def latencies(self) -> list[float | None]:
        """Each record's latency in ms (None: could not be timed); resolved once."""
        with self._lock:
            if self._latencies is None:
                self._latencies = [latency_of(record[3]) for record in self.records]
            return self._latencies

    def total_ms(self) -> float:
        """Time spent in collectives during the step."""
        return math.fsum(latency for latency in self.latencies() if latency is not None)

    def summary(self) -> dict[str, tuple[int, int, float, float]]:
        """op -> (count, bytes, latency ms, busbw Gbit/s) for this step."""
        latencies = self.latencies()
        with self._lock:
            if self._summary is None:
                sums: dict[str, list[float]] = {}
                for (op, nbytes, n, _, _), latency in zip(self.records, latencies, strict=True):
                    if latency is None:
                        continue
                    entry = sums.setdefault(op, [0, 0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += nbytes
                    entry[2] += latency
                    entry[3] += nbytes * volume_factors(op, n)[1]
                self._summary = {
                    op: (int(c), int(b), lat, gbps(bus, lat))
                    for op, (c, b, lat, bus) in sums.items()
                }
            return self._summary


class StepCommMs(Deferred):
    """``perf/comm_ms`` of a step whose timings are device events or async completions, plus
    ``known_ms`` of calls already timed (kept without a record)."""

    __slots__ = ("_batch", "_known_ms")

    def __init__(self, batch: StepBatch, known_ms: float = 0.0) -> None:
        self._batch = batch
        self._known_ms = known_ms

    def resolve(self) -> float:
        return self._batch.total_ms() + self._known_ms
