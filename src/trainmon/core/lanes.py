"""One lane per writer: a bounded queue and a thread, so a slow or hung writer costs only itself.

The pipeline hands each batch to every lane and moves on. A lane that is full makes the
pipeline wait for it (``when_full: "wait"``, at most half of ``full_wait_s``, so before the
training thread itself would give up) or drop at once (``"drop"``); a lane that stays full,
or whose writer is stuck in one call for that long, is *detached*: nothing waits for it any
more, what it misses is counted under its name (and in ``trainmon/dropped_events``), one
warning names it, and it rejoins once it has caught up. Flushes wait for every lane that is
not detached or stuck; close waits for every lane until a deadline and then says what each
did not write.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, StepScalars
from trainmon.core.writer import RunStatus, Writer, WriterGroup
from trainmon.logging import get_logger

_log = get_logger("writers")

_Op = tuple[str, Any, int]  # (what, payload, values it holds)
_COUNTER_SLACK = 1024  # room past a lane's bound for trainmon's own counters (a stuck lane
# still fills up, so memory stays bounded)


class FlushBarrier:
    """Set once every lane it was handed to has flushed (lanes that are stuck are not waited
    for: :meth:`wait` then returns False)."""

    def __init__(self, lanes: Sequence[_Lane], skipped: int = 0) -> None:
        self.skipped = skipped  # lanes left out (detached or stuck): wait() says False
        self._waiting = set(lanes)
        self._lock = threading.Lock()
        self.done = threading.Event()
        if not self._waiting:
            self.done.set()

    def _flushed(self, lane: _Lane) -> None:
        with self._lock:
            self._waiting.discard(lane)
            if not self._waiting:
                self.done.set()

    def wait(self, deadline: float | None, stuck_after_s: float) -> bool:
        """True once all lanes flushed; False at ``deadline`` or when only stuck lanes are left."""
        while not self.done.wait(0.02):
            if deadline is not None and time.monotonic() > deadline:
                return False
            with self._lock:
                waiting = list(self._waiting)
            if all(lane.is_stuck(stuck_after_s) for lane in waiting):
                return False
        return not self.skipped


#: The operations of a drain's batch, after which an idle lane tells its writer it caught up.
_BATCH_OPS = frozenset({"write", "windows", "extras"})


class _Lane:
    """One writer's queue and thread. Counters have a single writer each (no lock needed)."""

    def __init__(self, writer: Writer, capacity: int, name: str) -> None:
        self.writer = writer
        self.name = name  # unique among the lanes: "custom writer (slow) #2"
        #: whether the writer takes windows (``write_windows`` of its own, or ``every:
        #: window``): one that does not gets a drain's records in one call, not cut at windows
        self.windowed = writer.every == "window" or (
            type(writer).write_windows is not Writer.write_windows
        )
        self.group = WriterGroup([writer], label=name)  # report-once and error counting
        self.capacity = capacity
        self.ops: deque[_Op] = deque()
        self.enqueued = 0  # values, by the pipeline thread
        self.done = 0  # values, by the lane's thread
        self.missed = 0  # values not handed to this writer (lane full or detached)
        self.detached = False
        self.warned = False
        self.busy_since: float | None = None
        self.wakeup = threading.Event()
        self.closed = False
        self.thread = threading.Thread(
            target=self._run, name=f"trainmon-writer-{writer.kind}", daemon=True
        )
        self.thread.start()

    @property
    def pending(self) -> int:
        return self.enqueued - self.done

    def is_stuck(self, after_s: float) -> bool:
        """Busy in one call of the writer for longer than ``after_s`` seconds."""
        since = self.busy_since
        return since is not None and time.monotonic() - since > after_s

    def _run(self) -> None:
        ops = self.ops
        while True:
            if not ops:
                if self.detached and self.pending == 0:
                    self.detached = False
                    _log.info("%s caught up; it missed %d values", self.name, self.missed)
                self.wakeup.wait(1.0)  # put() sets it: the timeout is only a safety net
                self.wakeup.clear()
                continue
            what, payload, count = ops.popleft()
            self.busy_since = time.monotonic()
            try:
                if what == "write":
                    self.group.write(payload)
                elif what == "windows":
                    self.group.write_windows(payload)
                elif what == "extras":
                    self.group.write_extras(payload)
                elif what == "flush":
                    self.group.flush()
                    if payload is not None:
                        payload._flushed(self)
                elif what == "resume":
                    step, identity = payload
                    self.group.resume(step, [identity])
                elif what == "close":
                    self.group.close(payload)
                    return
            except Exception:  # the group isolates the writer; this keeps the lane alive
                pass
            finally:
                self.busy_since = None
                self.done += count
            if not ops and what in _BATCH_OPS:  # the drain's batch is all handed over
                self.busy_since = time.monotonic()
                try:
                    self.group.caught_up()
                except Exception:  # the group isolates the writer; this keeps the lane alive
                    pass
                finally:
                    self.busy_since = None


class WriterLanes:
    """The writers, each behind its own lane; the interface the pipeline's thread uses."""

    def __init__(
        self,
        writers: Sequence[Writer],
        *,
        capacity: int,
        when_full: Literal["wait", "drop"] = "wait",
        full_wait_s: float = 1.0,
    ) -> None:
        self.writers = list(writers)
        self.when_full = when_full
        self.full_wait_s = full_wait_s
        self._lanes = [
            _Lane(writer, capacity, name)
            for writer, name in zip(self.writers, writer_names(self.writers), strict=True)
        ]
        self._coalescing = False

    @contextmanager
    def coalesced_wakeups(self) -> Iterator[None]:
        """Writes inside wake each lane once, at the end: every wake-up of a thread costs CPU
        beside training (~0.1 ms on the team's VM), and one drain writes several segments and
        windows. Flushes, resumes and a lane half full still wake at once."""
        self._coalescing = True
        try:
            yield
        finally:
            self._coalescing = False
            for lane in self._lanes:
                if lane.ops:
                    lane.wakeup.set()

    # ---- what the pipeline calls (one thread) ------------------------------------------------

    def write(
        self,
        records: Sequence[StepScalars],
        *,
        bounded: bool = True,
        windowed: bool | None = None,
    ) -> None:
        """Per-step records, to the writers that take every step; ``bounded=False`` for
        trainmon's own few counter values, which a lane that is merely full must not lose.
        ``windowed``: only to the writers that take windows (True) or that do not (False)."""
        if not records:
            return
        count = sum(len(record.values) for record in records)
        for lane in self._lanes:
            if lane.writer.every == "step" and (windowed is None or lane.windowed == windowed):
                self._put(lane, ("write", records, count), bounded)

    def write_kinds(self, records: Sequence[StepScalars], kinds: frozenset[str]) -> None:
        """Per-step records to the ``every: "step"`` writers whose ``kind`` is in ``kinds``
        (events on another x axis, see :meth:`Pipeline.put_side`)."""
        if not records:
            return
        count = sum(len(record.values) for record in records)
        for lane in self._lanes:
            if lane.writer.every == "step" and lane.writer.kind in kinds:
                self._put(lane, ("write", records, count))

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        """Completed windows, to every writer that takes them (see
        :meth:`WriterGroup.write_windows`)."""
        for lane in self._lanes:
            if lane.windowed:
                self._put(lane, ("windows", windows, len(windows)))

    def write_extras(self, records: Sequence[Extra]) -> None:
        """Histograms, text and hyper-parameters, to every writer (see
        :meth:`WriterGroup.write_extras`)."""
        for lane in self._lanes:
            self._put(lane, ("extras", records, len(records)))

    def flush(self, barrier: FlushBarrier | None = None) -> None:
        """Ask every lane to flush; ``barrier`` (from :meth:`barrier`) is told when each did."""
        for lane in self._lanes:
            if barrier is None and lane.ops and lane.ops[-1][0] == "flush":
                continue  # one queued flush is enough for a lane that is behind
            lane.ops.append(("flush", barrier, 0))
            lane.wakeup.set()

    def resume(self, step: int, identities: Sequence[Mapping[str, Any] | None]) -> None:
        """Each writer's :meth:`Writer.resume` with its saved identity (same order as
        :attr:`writers`), in stream order on its lane (see :meth:`WriterGroup.resume`)."""
        for lane, identity in zip(self._lanes, identities, strict=True):
            if not lane.closed:
                lane.ops.append(("resume", (step, identity), 0))
                lane.wakeup.set()

    def barrier(self, *, detached_too: bool = False) -> FlushBarrier:
        """A barrier over the lanes worth waiting for: not stuck in a call, not closed, and
        (unless ``detached_too``, as at close) not detached."""
        live = [
            lane
            for lane in self._lanes
            if (detached_too or not lane.detached)
            and not lane.is_stuck(self.full_wait_s)
            and not lane.closed
        ]
        return FlushBarrier(live, skipped=len(self._lanes) - len(live))

    def close(self, status: RunStatus = "success") -> None:
        """Queue each writer's finalize(``status``) and close after what it still has to write
        (returns at once)."""
        for lane in self._lanes:
            if not lane.closed:
                lane.closed = True
                lane.ops.append(("close", status, 0))
                lane.wakeup.set()

    def join(self, deadline: float) -> dict[str, int]:
        """Wait for the lanes to close until ``deadline``; values each writer did not write
        (missed, or still queued when time ran out), for the writers that lost any."""
        for lane in self._lanes:
            lane.thread.join(max(0.0, deadline - time.monotonic()))
        return self.undelivered()

    def undelivered(self) -> dict[str, int]:
        """``{writer: values it missed or gave up or still holds}`` for writers with any."""
        lost: dict[str, int] = {}
        for lane in self._lanes:
            left = lane.pending if lane.thread.is_alive() else 0
            count = lane.missed + lane.group.dropped_events + left
            if count:
                lost[lane.name] = count
        return lost

    @property
    def error_count(self) -> int:
        """Failed writer calls, all writers together (``trainmon/writer_errors``)."""
        return sum(lane.group.error_count for lane in self._lanes)

    @property
    def dropped_events(self) -> int:
        """Values the writers missed or gave up, all together (part of dropped_events)."""
        return sum(lane.missed + lane.group.dropped_events for lane in self._lanes)

    # ---- internals ---------------------------------------------------------------------------

    def _put(self, lane: _Lane, op: _Op, bounded: bool = True) -> None:
        count = op[2]
        if lane.closed:
            return
        if lane.is_stuck(self.full_wait_s):  # hung in one call: found now, not at close
            self._detach(lane)
            lane.missed += count
            return
        limit = lane.capacity + (0 if bounded else _COUNTER_SLACK)
        full = lane.pending + count > limit and lane.pending > 0
        if full and not self._room(lane, count):
            lane.missed += count
            return
        lane.enqueued += count
        idle = not lane.ops  # a lane with ops queued looks again after each: no wake-up needed
        lane.ops.append(op)
        if self._coalescing:
            if lane.pending * 2 > lane.capacity:  # half full: do not let it fill in a drain
                lane.wakeup.set()
        elif idle:
            lane.wakeup.set()

    def _room(self, lane: _Lane, count: int) -> bool:
        """Wait (bounded) for room in a full lane; detach it (one warning) when there is none."""
        lane.wakeup.set()
        if self.when_full == "wait" and not lane.detached:
            # half of what the caller waits on a full queue: a writer that cannot catch up is
            # detached before the caller would give up and drop for every writer
            patience = self.full_wait_s / 2
            deadline = time.monotonic() + patience
            fits: Callable[[], bool] = lambda: lane.pending + count <= lane.capacity  # noqa: E731
            while time.monotonic() < deadline and not lane.is_stuck(patience):
                if fits() or lane.pending == 0:
                    return True
                time.sleep(0.001)
        self._detach(lane)
        return False

    def _detach(self, lane: _Lane) -> None:
        """Stop waiting for ``lane``; one warning names it (the first time)."""
        lane.detached = True
        if not lane.warned:
            lane.warned = True
            stuck = lane.is_stuck(self.full_wait_s / 2)
            _log.warning(
                "%s %s; it is detached: nothing waits for it, the other writers and training "
                "carry on, and the values it misses are counted in trainmon/dropped_events "
                "until it catches up",
                lane.name,
                f"has been stuck in one call for over {self.full_wait_s / 2:g} s"
                if stuck
                else f"cannot keep up (its queue of {lane.capacity} values is full)",
            )


def writer_names(writers: Sequence[Writer]) -> list[str]:
    """Each writer's name, ``kind writer (location)``, with ``#2``, ``#3``... for repeats."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for writer in writers:
        base = f"{writer.kind} writer ({writer.location})"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return names
