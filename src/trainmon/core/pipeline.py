"""Bounded queue plus one background thread: the only place where formatting and I/O happen.

The training thread appends one plain ``(wall_time, default_step, items, needs_resolving)``
tuple per call to a deque (thread-safe, no lock); control entries (side events, histogram/text
extras as :class:`~trainmon.core.records.Pending`, flush requests) have their own types. The
background thread wakes every few milliseconds, drains the deque and runs each batch of scalar
entries through named stages, in order:

resolve → group → aggregate → cross-rank → fan out → observe

(:meth:`Pipeline._resolve`: read the tensor copies captured at the call and trainmon's own
tensor values in one batch; :meth:`~Pipeline._group`: values by step into
:class:`~trainmon.core.events.StepScalars`; :meth:`~Pipeline._aggregate`: into windows;
:meth:`~Pipeline._cross_rank`: add cross-rank metrics to a completed window; fan out to the
writers; :meth:`~Pipeline._observe`: alert rules and callbacks). It flushes the writers at
least every ``flush_interval_s``.

The queue is bounded in events: producers add to ``_enqueued`` and the consumer to
``_consumed``, so each counter has a single writer and no lock is needed (with several
producing threads the bound is approximate by a few calls).

From this thread each writer is reached through its own lane (:mod:`trainmon.core.lanes`),
so a slow or hung writer never holds up this thread, the other writers or the caller.

A step's values are one record however many calls logged them (a name twice keeps its last
value): a drain that ends within :data:`HOLD_S` of the newest step's last call keeps that step's
calls back until the next drain (or a flush, or the close), so a call of the same step that comes
just after the drain (a user's ``train/loss`` after the engine's own) joins them instead of
writing the step a second time.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from trainmon.config import PipelineConfig
from trainmon.core.aggregate import MetricStats, WindowAggregator, WindowStats
from trainmon.core.capture_store import CaptureStore
from trainmon.core.entries import (
    Entry,
    FlushRequest,
    Item,
    SampledValues,
    SideEvents,
    open_step,
)
from trainmon.core.events import Number, StepScalars
from trainmon.core.lanes import WriterLanes
from trainmon.core.observer import Observer
from trainmon.core.records import Pending, PendingMark
from trainmon.core.stages import group_records
from trainmon.core.values import Snapshot
from trainmon.core.writer import RunStatus, Writer, WriterGroup
from trainmon.logging import get_logger

_log = get_logger("pipeline")

#: Called with each completed window on every rank; returns extra (cross-rank) metrics or None.
WindowReducer = Callable[[WindowStats], Mapping[str, Number] | None]


DROPPED_METRIC = "trainmon/dropped_events"
WRITER_ERRORS_METRIC = "trainmon/writer_errors"
#: the background thread's wake-up interval when ``trainmon.drain_interval_s`` is null and no
#: alert rule stops training: the writers' flush interval, since their files see the values no
#: sooner (under ``attach``, 0.25 s cost the pipeline thread ~40 % more CPU)
DEFAULT_DRAIN_INTERVAL_S = 1.0
#: ... and when one does (a NaN loss, read in the background, stops training a few steps later)
STOP_RULES_DRAIN_INTERVAL_S = 0.02
_CHUNK_ENTRIES = 2048
#: A busy queue (this many calls since the last drain) wakes the background thread once
#: ``BUSY_DRAIN_S`` have passed since that drain, before its interval. Side events (DeepSpeed's
#: ``Train/Samples``, one per step beside the step's own call) do not count: a 10 ms step
#: would otherwise drain every 0.64 s instead of once a second. What a drain turns into
#: records and windows lives until the writers took it; a drain's worth that outlives two young
#: garbage collections is promoted, and enough promotions set off a full collection (~0.1 s
#: over torch's objects, on the training thread). A tight loop of 16 tensors a call (~30 µs)
#: had one every ~30,000 calls drained every 50 ms, none in 100,000 drained every 10 ms; a loop
#: of bare hooks (20,000 calls a second) woken every 128 calls spent its time waking the
#: background.
WAKE_AT_ENTRIES = 128
BUSY_DRAIN_S = 0.01
#: A drain that ends less than this after the newest step's last call holds that step's calls
#: back one drain (never longer), so that calls of one step make one record: the next drain
#: takes the held calls with any that followed them (a busy loop drains every BUSY_DRAIN_S,
#: and a step's calls are closer together than that when 128 calls fit in it). A flush (or
#: the close) writes them at once.
HOLD_S = 0.05


#: What travels through the queue: a scalar :data:`Entry` (a plain tuple, the hot path) or a
#: control entry, told apart by type: side events, an extra (histogram, text, hparams,
#: progress) still to build, or a flush request.
QueueEntry = Entry | SideEvents | SampledValues | Pending | FlushRequest


class Pipeline:
    """Moves checked events from the calling thread to the writers without blocking the caller."""

    def __init__(
        self,
        writers: WriterGroup | Sequence[Writer],
        config: PipelineConfig | None = None,
        aggregator: WindowAggregator | None = None,
        reducer: WindowReducer | None = None,
    ) -> None:
        self.config = config or PipelineConfig()
        self.writers = WriterLanes(
            writers.writers if isinstance(writers, WriterGroup) else writers,
            capacity=self.config.queue_size,
            when_full=self.config.when_full,
            full_wait_s=self.config.full_wait_s,
        )
        self.reducer = reducer
        self._observers: list[Observer] = []
        self._status: RunStatus = "success"  # how the run ended, told to the writers at close
        self.aggregator = aggregator or WindowAggregator(
            self.config.window_steps or 10, self.config.window_seconds
        )
        self.dropped = 0
        self._queue: deque[QueueEntry] = deque()
        self._capacity = self.config.queue_size
        self.captures = CaptureStore()
        self._enqueued = 0
        self._consumed = 0
        self._wakeup = threading.Event()
        self._busy_wake_at = 0.0  # monotonic time after which a busy queue wakes the thread
        self._calls_since_drain = 0  # the training thread counts, the background resets
        self._stopping = False
        self._closed = False
        self._warned_full = False
        self._internal_errors = 0
        self._reported_counters = (0, 0)
        self._last_step = 0
        flush_every = self.config.flush_interval_s
        # few, large batches: each wake-up of this thread and the writers' costs CPU beside
        # training (50 ms cost twice the CPU of 250 ms per step; see docs/performance.md)
        drain_every = self.config.drain_interval_s or DEFAULT_DRAIN_INTERVAL_S
        self._poll_s = max(0.001, min(drain_every, flush_every))
        self._hold_s = min(HOLD_S, self._poll_s)
        self._held: list[Entry] = []  # the newest step's calls, held back by the last drain
        self._held_once = 0  # in a drain: how many of the batch's first entries were held
        self._thread = threading.Thread(target=self._run, name="trainmon-pipeline", daemon=True)
        self._thread.start()

    # ---- training thread -------------------------------------------------------------------

    def put(self, entry: QueueEntry, count: int, hurry: bool = True) -> None:
        """Queue one call's events; only a full queue makes it wait briefly or drop (counted).
        ``hurry``: the call counts towards the busy-queue wake-up (:data:`WAKE_AT_ENTRIES`)."""
        pending = self._enqueued - self._consumed
        if pending + count > self._capacity and pending > 0 and not self._make_room(count):
            return
        self._enqueued += count
        self._queue.append(entry)
        if not hurry:
            return
        calls = self._calls_since_drain + 1
        self._calls_since_drain = calls
        if calls >= WAKE_AT_ENTRIES and time.monotonic() >= self._busy_wake_at:
            self._calls_since_drain = 0
            self._wakeup.set()  # a fast loop: drain now, not at the interval

    def put_captured(self, wall_time: float, step: int, names: tuple[str, ...], copy: Any) -> None:
        """Queue a call whose values are all in one CPU copy taken at the call: the copy goes to
        :attr:`captures`, the entry holds the names and the copy's key (see
        :mod:`~trainmon.core.capture_store`). Nothing is kept of a call the queue drops."""
        count = len(names)
        pending = self._enqueued - self._consumed
        if pending + count > self._capacity and pending > 0 and not self._make_room(count):
            return
        self._enqueued += count
        self.captures.put(copy, self._queue, (wall_time, step, names))  # copy and entry at once
        calls = self._calls_since_drain + 1
        self._calls_since_drain = calls
        if calls >= WAKE_AT_ENTRIES and time.monotonic() >= self._busy_wake_at:
            self._calls_since_drain = 0
            self._wakeup.set()

    def _make_room(self, count: int) -> bool:
        self._wakeup.set()
        if self.config.when_full == "wait" and not self._closed:
            deadline = time.monotonic() + self.config.full_wait_s
            while time.monotonic() < deadline and self._thread.is_alive():
                pending = self._enqueued - self._consumed
                if pending + count <= self._capacity or pending == 0:
                    return True
                time.sleep(0.001)
        self.dropped += count
        if not self._warned_full:
            self._warned_full = True
            _log.warning(
                "event queue full (%d events): dropping events, counted in %s; log less often, "
                "raise trainmon.queue_size, or check that the writers keep up",
                self._capacity,
                DROPPED_METRIC,
            )
        return False

    def put_side(
        self,
        wall_time: float,
        items: Sequence[Item],
        kinds: frozenset[str],
        needs_resolving: bool | Snapshot = True,
    ) -> None:
        """Queue ``(name, value, step)`` events on their own x axis (DeepSpeed's samples).

        They go only to the ``every: "step"`` writers whose ``kind`` is in ``kinds``, and never
        into windows, cross-rank statistics or observers (alert rules): their steps are not
        the training steps, and only one rank logs them. They take their place in the bound
        but do not hurry the drain (:data:`WAKE_AT_ENTRIES`).
        """
        self.put(SideEvents(wall_time, items, kinds, needs_resolving), len(items), hurry=False)

    def put_sampled(self, items: Sequence[tuple[str, Number]]) -> None:
        """Queue ``(name, number)`` pairs sampled by another thread (the system sampler).

        They join the stream at the step it has reached (the last step the background thread
        saw before them), so they are windowed and observed like the training loop's values.
        They take no place in the bound and are not counted in :attr:`events_seen`: the stall
        watchdog must not read a sample as training progress.
        """
        self._queue.append(SampledValues(time.time(), items))

    def put_extra(self, pending: Pending) -> None:
        """Queue a histogram, text or hyper-parameters snapshot (counts as one event)."""
        self.put(pending, 1)

    def put_mark(self, pending: Pending) -> None:
        """Queue one of trainmon's own rare records (a span, the attempt's end) past the
        bound: never dropped, and never counted as a user's event that was."""
        self._enqueued += 1
        self._queue.append(pending)

    def flush(
        self,
        timeout: float | None = None,
        *,
        then: Callable[[], None] | None = None,
        writers: bool = True,
    ) -> bool:
        """Block until every event queued before this call is written and flushed.

        With ``writers=False`` it returns as soon as the background thread has handed those
        events on (the alert rules and observers have seen them; the writers' flushes are
        queued but not waited for): what a checkpoint needs, whatever the writers do.

        ``then`` runs on the background thread right at that point in the stream, before the
        writers flush (so it may touch the aggregator and the observers without a lock, and
        queue work for the writers' lanes); an exception it raises is re-raised here. False
        on timeout, when the pipeline is closed, or when a writer stuck in a call (or
        detached) could not flush (``then`` may still run later in that case).
        """
        if self._closed or not self._thread.is_alive():
            return False
        request = FlushRequest(then)
        self._queue.append(request)  # not counted: it holds no place in the bound
        self._wakeup.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not request.reached.wait(0.05):
            if not self._thread.is_alive():
                return False
            if deadline is not None and time.monotonic() > deadline:
                return False
        if request.error is not None:
            raise request.error
        if not writers:
            return True
        assert request.barrier is not None
        return request.barrier.wait(deadline, self.config.full_wait_s)

    def close(self, deadline: float | None = None, status: RunStatus = "success") -> dict[str, int]:
        """Write and flush everything queued, close the writers (telling them ``status``), stop
        the threads, waiting at most until ``deadline`` (``time.monotonic()``; default
        ``close_timeout_s`` from now).
        Returns what was not delivered: ``{"queue": n}`` for events dropped on a full queue and
        ``{writer: n}`` for values a writer missed or had not written by then. Idempotent."""
        if deadline is None:
            deadline = time.monotonic() + self.config.close_timeout_s
        if not self._closed:
            self._status = status
            self._closed = True
            self._stopping = True
            self._wakeup.set()
        if threading.current_thread() is self._thread:
            return {}
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self.writers.close(status)  # the background thread is stuck: close the lanes anyway
        self.writers.join(deadline)
        return self.undelivered()

    def undelivered(self) -> dict[str, int]:
        """What has not reached each writer: ``{"queue (full)": n}`` for events dropped on a
        full queue, ``{"queue (not processed in time)": n}`` once the background thread is
        stuck at close, and ``{writer: n}`` for values a writer missed, gave up or still holds."""
        lost: dict[str, int] = {}
        if self.dropped:
            lost["queue (full)"] = self.dropped
        if self._closed and self._thread.is_alive() and self.pending:
            lost["queue (not processed in time)"] = self.pending
        lost.update(self.writers.undelivered())
        return lost

    @property
    def dropped_total(self) -> int:
        """Events dropped on a full queue plus values the writers missed or gave up."""
        return self.dropped + self.writers.dropped_events

    @property
    def events_seen(self) -> int:
        """Events offered to the queue so far, queued or dropped (only ever grows)."""
        return self._enqueued + self.dropped

    def add_observer(self, observer: Observer) -> None:
        """Watch the stream from now on (safe from any thread: the list is replaced, not edited)."""
        self._observers = [*self._observers, observer]

    @property
    def pending(self) -> int:
        """Events queued and not yet taken by the background thread (the newest step's, which
        a drain may hold back until the next, count as taken)."""
        return self._enqueued - self._consumed

    # ---- background thread -----------------------------------------------------------------

    def _run(self) -> None:
        flush_every = self.config.flush_interval_s
        next_flush = time.monotonic() + flush_every
        while True:
            self._wakeup.wait(self._poll_s)
            self._wakeup.clear()
            self._calls_since_drain = 0
            self._busy_wake_at = time.monotonic() + BUSY_DRAIN_S
            stopping = self._stopping
            self._drain(hold=not stopping)
            now = time.monotonic()
            if now >= next_flush:
                self.writers.flush()
                next_flush = now + flush_every
            if stopping and not self._queue:
                break
        self._close_window(final=True)
        final = self.writers.barrier(detached_too=True)
        self.writers.flush(final)  # so errors of this last flush are counted before closing
        final.wait(time.monotonic() + self.config.close_timeout_s, self.config.full_wait_s)
        self._emit_counters()
        for observer in self._observers:
            try:
                observer.close()
            except Exception:
                self._count_internal_error(f"{type(observer).__name__}.close failed")
        self.writers.close(self._status)

    def _drain(self, hold: bool = True) -> None:
        """Scalar entries go through the stages in batches; a control entry first has what came
        before it written, so the stream keeps its order, except that the newest step's calls
        stay open past sampled values and an extra of that step or an earlier one (a histogram,
        a text), so that one step's calls stay one record. Side
        events (another x axis, other tags) ride along with the batch: DeepSpeed sends some
        every step, and cutting the batch at each would write every step on its own. ``hold``:
        the newest step's calls may wait for the next drain (see :data:`HOLD_S`). The writers'
        threads wake once, after the drain."""
        with self.writers.coalesced_wakeups():
            self._drain_queue(hold)

    def _drain_queue(self, hold: bool) -> None:
        queue = self._queue
        batch, self._held = self._held, []
        self._held_once = len(batch)
        worked = bool(queue) or bool(batch)  # counters follow real work: a writer failing on
        sides: list[SideEvents] = []  # the counter record itself must not make one every poll
        while queue:
            entry = queue.popleft()
            if isinstance(entry, tuple):  # one call's scalars
                batch.append(entry)
            elif isinstance(entry, SideEvents):
                sides.append(entry)
            elif isinstance(entry, SampledValues):  # at the step the stream has reached
                batch = self._emit_older(batch, sides, open_step(batch))
                sides = []
                step = batch[-1][1] if batch else self._last_step
                self._emit([(entry.wall_time, step, entry.items, False)])
            elif isinstance(entry, Pending) and not isinstance(entry, PendingMark):
                batch = self._emit_older(batch, sides, open_step(batch, _extra_step(entry)))
                sides = []
                self._consumed += 1
                self._write_extra(entry)  # histogram/text/hparams/progress
            else:  # a mark (span, attempt end) or a flush request: after everything before it
                self._emit_all(batch, sides)
                batch, sides = [], []
                if isinstance(entry, Pending):
                    self._consumed += 1
                    self._write_extra(entry)
                else:
                    self._reach_flush_point(entry)
            if len(batch) + len(sides) >= _CHUNK_ENTRIES:
                start = open_step(batch)
                batch = self._emit_older(batch, sides, start if start > 0 else len(batch))
                sides = []
        if hold and batch and time.time() - batch[-1][0] < self._hold_s:
            start = open_step(batch)
            if start >= self._held_once:  # held back once at most
                batch = self._emit_older(batch, sides, start)
                self._held, batch, sides = batch, [], []
        self._emit_all(batch, sides)
        if worked:
            self._emit_counters()
        self._close_window(final=False)

    def _emit_all(self, batch: list[Entry], sides: list[SideEvents]) -> None:
        """Write the batch and the side events (the batch's held entries come first)."""
        self._emit(batch)
        self._emit_sides(sides)
        self._consumed += sum(len(entry[2]) for entry in batch) + sum(
            len(side.items) for side in sides
        )
        self._held_once = max(0, self._held_once - len(batch))

    def _emit_older(self, batch: list[Entry], sides: list[SideEvents], start: int) -> list[Entry]:
        """Write the batch up to ``start`` (and the side events); return the rest."""
        self._emit_all(batch[:start], sides)
        return batch[start:]

    def _reach_flush_point(self, request: FlushRequest) -> None:
        """Everything queued before the request is written: close a complete window, run the
        request's ``then``, ask the writers to flush and hand the caller the barrier."""
        self._emit_counters()
        self._close_window(final=False)
        request.run_then()
        request.barrier = self.writers.barrier()
        self.writers.flush(request.barrier)
        request.reached.set()

    def _write_extra(self, pending: Pending) -> None:
        """Build the record (bin a histogram, ...) and hand it to the writers."""
        try:
            record = pending.build()
        except Exception:
            self._count_internal_error(f"could not build {type(pending).__name__}")
            return
        if record is not None:
            self.writers.write_extras([record])
            for observer in self._observers:
                try:
                    observer.on_extra(record)
                except Exception:
                    self._count_internal_error(f"{type(observer).__name__}.on_extra failed")

    def _emit(self, batch: list[Entry]) -> None:
        """The stages, in order, for one batch of scalar entries."""
        if not batch:
            return
        try:
            records = self._records(batch)  # resolve → group
        except Exception:
            self._count_internal_error("could not turn a batch of events into records")
            return
        if not records:
            return
        self._last_step = records[-1].step
        self._aggregate(records)  # → cross-rank → fan out
        if self._observers:
            self._observe("on_records", records)

    def _emit_sides(self, sides: list[SideEvents]) -> None:
        """Side events: resolve → group → fan out to the writers of their kinds, nothing else;
        one pass per set of kinds (DeepSpeed's events all have the same)."""
        if not sides:
            return
        by_kinds: dict[frozenset[str], list[Entry]] = {}
        for side in sides:
            needs_resolving = side.needs_resolving if side.needs_resolving is not False else True
            by_kinds.setdefault(side.kinds, []).append(
                (side.wall_time, 0, side.items, needs_resolving)
            )
        for kinds, entries in by_kinds.items():
            try:
                records = self._records(entries)
            except Exception:
                self._count_internal_error("could not turn side events into records")
                continue
            if records:
                self.writers.write_kinds(records, kinds)

    def run_stages(self, batch: list[Entry]) -> None:
        """Run the background stages on one batch of entries, on the calling thread: for
        benchmarks and tests of a pipeline that was closed (its own thread is gone)."""
        self._emit(batch)

    def records_of(self, batch: list[Entry]) -> list[StepScalars]:
        """The resolve and group stages alone: entries become one record per step."""
        return self._records(batch)

    def _records(self, batch: list[Entry]) -> list[StepScalars]:
        return group_records(batch, self._count_internal_error, self.captures)

    def _aggregate(self, records: list[StepScalars]) -> None:
        """Stage 3: records into windows. For the writers that take windows, fan-out is
        interleaved so that a completed window (with its cross-rank metrics) is written after
        its own steps and before the next ones; the others get the batch in one call (each
        call costs a writer's thread Python per metric, whatever it holds)."""
        try:
            closed = self.aggregator.add_marking(records)
        except Exception:  # the records are still written; their windows may be incomplete
            self._count_internal_error("could not aggregate a batch of records")
            closed = []
        writers = self.writers
        if not closed:
            writers.write(records)
            return
        writers.write(records, windowed=False)  # writers that ignore windows: in one call
        start = 0
        for index, window in closed:
            writers.write(records[start:index], windowed=True)
            self._publish([window])
            start = index
        writers.write(records[start:], windowed=True)

    def _close_window(self, final: bool) -> None:
        """Hand a window that is complete (or, at shutdown, any open window) to the writers."""
        try:
            aggregator = self.aggregator
            window = aggregator.close() if final else aggregator.close_if_complete(time.time())
        except Exception:
            self._count_internal_error("could not close a window")
            return
        if window is not None:
            self._publish([window])

    def _publish(self, windows: Sequence[WindowStats]) -> None:
        """Completed windows: cross-rank → fan out → observe."""
        for window in windows:
            window = self._cross_rank(window)
            self.writers.write_windows([window])
            self._observe("on_window", window)

    def _cross_rank(self, window: WindowStats) -> WindowStats:
        """Stage 4: the reducer's cross-rank metrics and the observers' window metrics (live
        goodput), written as scalars at the window's last step and merged into the window
        (unchanged when there are none)."""
        extra: dict[str, Number] = {}
        if self.reducer is not None:
            try:
                extra.update(self.reducer(window) or {})
            except Exception:
                self._count_internal_error("cross-rank reduction failed")
        for observer in self._observers:
            try:
                extra.update(observer.enrich(window) or {})
            except Exception:
                self._count_internal_error(f"{type(observer).__name__}.enrich failed")
        if not extra:
            return window
        self.writers.write([StepScalars(window.last_step, window.end_time, dict(extra))])
        merged = dict(window.metrics)
        merged.update((k, MetricStats(1, float(v), v, v, v)) for k, v in extra.items())
        return replace(window, metrics=merged)

    def _observe(self, hook: str, payload: Any) -> None:
        """Stage 6: observers see records or a window; what they return goes to every writer."""
        for observer in self._observers:
            try:
                extra = getattr(observer, hook)(payload)
            except Exception:
                self._count_internal_error(f"{type(observer).__name__}.{hook} failed")
                continue
            if extra:
                self.writers.write(extra)

    def _count_internal_error(self, what: str) -> None:
        self._internal_errors += 1
        if self._internal_errors == 1:
            _log.warning("%s; further such errors are not printed", what, exc_info=True)

    def _emit_counters(self) -> None:
        counters = (self.dropped_total, self.writers.error_count)
        if counters == self._reported_counters:
            return
        values = {DROPPED_METRIC: counters[0], WRITER_ERRORS_METRIC: counters[1]}
        self.writers.write([StepScalars(self._last_step, time.time(), values)], bounded=False)
        self._reported_counters = counters


def _extra_step(extra: Pending) -> Any:
    """The step of a histogram, text or hyper-parameters record still to build (None: none)."""
    return getattr(getattr(extra, "record", extra), "step", None)
