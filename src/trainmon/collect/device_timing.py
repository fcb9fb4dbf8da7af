"""Span timers for forward / backward / optimizer time that never make the training thread wait.

A span timer adds up the time of several spans (one per micro-batch) and hands the step's total
over with :meth:`take`. Two implementations share that interface:

* :class:`HostSpanTimer` reads ``time.perf_counter``; right for the CPU, where an operation has
  finished when the call returns.
* :class:`CudaSpanTimer` records a pair of CUDA events around each span, taken from a reusable
  :class:`EventPool`. :meth:`take` returns an :class:`EventSpans` (a
  :class:`~trainmon.core.values.Deferred`) that the monitor's background thread resolves with
  ``end.synchronize()`` and ``start.elapsed_time(end)`` (milliseconds, per the
  ``torch.cuda.Event.elapsed_time`` docs); the events then go back to the pool. The training
  thread only calls ``Event.record``, which enqueues a marker on the stream and returns at once:
  no ``torch.cuda.synchronize()`` and no event wait ever happens on it.

Events must be created with ``enable_timing=True`` for ``elapsed_time``; an event can be
recorded again once its previous recording has completed, which is guaranteed here because an
event only returns to the pool after ``synchronize()``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from trainmon.core.values import Deferred

_KEEP_FREE_EVENTS = 512


class SpanTimer(Protocol):
    """Times spans on the training thread; ``take`` returns the total since the last ``take``."""

    def start(self) -> None:
        """Mark the start of a span."""

    def stop(self) -> None:
        """Mark the end of the span started last."""

    def take(self) -> float | Deferred:
        """Milliseconds spent in spans since the previous call (a number or a Deferred)."""


class HostSpanTimer:
    """Span timer on the host clock; the CPU's work is done when a call returns."""

    __slots__ = ("_started", "_total_s")

    def __init__(self) -> None:
        self._started = 0.0
        self._total_s = 0.0

    def start(self) -> None:
        """Mark the start of a span."""
        self._started = time.perf_counter()

    def stop(self) -> None:
        """Add the span started last to the total."""
        self._total_s += time.perf_counter() - self._started

    def take(self) -> float:
        """Milliseconds spent in spans since the previous call; never negative."""
        total_ms = self._total_s * 1e3
        self._total_s = 0.0
        return total_ms if total_ms > 0.0 else 0.0


class EventPool:
    """Timing events reused across steps: taken on the training thread, returned in the background.

    ``deque.pop`` and ``deque.extend`` are atomic in CPython, so the two threads need no lock.
    The pool grows only while the background thread lags; at most ``keep`` free events are kept.
    """

    def __init__(self, factory: Callable[[], Any], keep: int = _KEEP_FREE_EVENTS) -> None:
        self._factory = factory
        self._free: deque[Any] = deque()
        self._keep = keep
        self.created = 0

    def acquire(self) -> Any:
        """A free event, or a new one when none is free."""
        try:
            return self._free.pop()
        except IndexError:
            self.created += 1
            return self._factory()

    def release(self, events: list[Any]) -> None:
        """Return events whose recordings have completed (called after ``synchronize``)."""
        room = self._keep - len(self._free)
        if room > 0:
            self._free.extend(events[:room])

    @property
    def free(self) -> int:
        """Events ready for reuse."""
        return len(self._free)


class EventSpans(Deferred):
    """The summed duration of ``[start0, end0, start1, end1, ...]`` event pairs, in ms.

    Resolved on the background thread: it waits for each end event there, then returns the
    events to their pool. A trailing unpaired start (a span cut by an exception) is ignored.
    """

    __slots__ = ("_events", "_pool")

    def __init__(self, events: list[Any], pool: EventPool) -> None:
        self._events = events
        self._pool = pool

    def resolve(self) -> float:
        """Wait for the recorded events (background thread only) and add up the spans."""
        events = self._events
        total_ms = 0.0
        for i in range(0, len(events) - 1, 2):
            start, end = events[i], events[i + 1]
            end.synchronize()
            start.synchronize()  # a no-op on one stream; needed if spans crossed streams
            total_ms += start.elapsed_time(end)
        self._pool.release(events)
        return total_ms if total_ms > 0.0 else 0.0


class CudaSpanTimer:
    """Span timer with CUDA events recorded on the current stream of ``device``."""

    __slots__ = ("_current_stream", "_device", "_events", "_pool")

    def __init__(
        self,
        pool: EventPool,
        device: Any = None,
        current_stream: Callable[[Any], Any] | None = None,
    ) -> None:
        if current_stream is None:
            import torch

            current_stream = torch.cuda.current_stream
        self._pool = pool
        self._device = device
        self._current_stream = current_stream
        self._events: list[Any] = []

    def start(self) -> None:
        """Record a start event (enqueued on the stream; returns at once)."""
        event = self._pool.acquire()
        event.record(self._current_stream(self._device))
        self._events.append(event)

    def stop(self) -> None:
        """Record the matching end event."""
        event = self._pool.acquire()
        event.record(self._current_stream(self._device))
        self._events.append(event)

    def take(self) -> float | Deferred:
        """A Deferred summing this step's spans (0.0 when there were none)."""
        events = self._events
        if not events:
            return 0.0
        self._events = []
        return EventSpans(events, self._pool)


def cuda_event_pool() -> EventPool:
    """An :class:`EventPool` of ``torch.cuda.Event(enable_timing=True)``."""
    import torch

    event_type: Any = torch.cuda.Event
    return EventPool(lambda: event_type(enable_timing=True))


def span_timers(device: Any, count: int) -> list[SpanTimer]:
    """``count`` timers for ``device``: CUDA event timers sharing one pool on a CUDA device,
    host timers elsewhere (exact on the CPU; on other asynchronous devices they measure the
    host's time to issue the work)."""
    if getattr(device, "type", None) == "cuda":
        import torch

        # an int takes torch.cuda.current_stream's fast path; a torch.device is examined anew
        index = device.index if device.index is not None else torch.cuda.current_device()
        pool = cuda_event_pool()
        return [CudaSpanTimer(pool, index) for _ in range(count)]
    return [HostSpanTimer() for _ in range(count)]
