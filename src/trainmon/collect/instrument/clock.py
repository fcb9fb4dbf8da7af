"""The step's phase clock: forward, backward, optimizer, comm, data and between-steps time,
disjoint by design.

A driver marks phases with ``begin(phase)`` / ``end(phase)``. Phases nest: a phase begun while
another is open pauses the outer one until it ends, so every instant of a step counts for at
most one phase, and the parts of a step add up to no more than the step. A comm source that
reports the host time of collectives (:meth:`CommSource.watch_host_comm`) lets the host clock also
take collectives run *inside* a phase (DeepSpeed's all-reduce inside ``backward``, ZeRO's
gathers inside ``forward``) out of that phase, since they are counted in ``comm``.

On a CUDA device forward, backward, optimizer and comm are CUDA-event spans (read on the
monitor's background thread), and data waits and the time between steps stay on the host
clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from trainmon.collect.device_timing import HostSpanTimer, SpanTimer, span_timers
from trainmon.core.values import Deferred

#: Phase indices (what ``begin``/``end`` take) and their order in :data:`PHASES`. ``DATA`` is
#: a wait inside a data loader the driver sees; ``BETWEEN`` the time from a ``step()`` to the
#: next forward outside such a loader (user code, or a loader trainmon does not see).
DATA, FORWARD, BACKWARD, COMM, OPTIMIZER, BETWEEN = range(6)
PHASES = ("data", "forward", "backward", "comm", "optimizer", "between_steps")
_NONE = -1
_now = time.perf_counter


class PhaseClock(Protocol):
    """Exclusive time per phase since the previous :meth:`take`."""

    first: float  # host time of the first begin (-1.0 before it): the first step's start

    def begin(self, phase: int) -> None:
        """Open ``phase`` now (pausing the phase open until now, if any)."""

    def end(self, phase: int) -> None:
        """Close ``phase``; a phase that is not open is ignored; inner phases left open close."""

    def take(self, now: float) -> list[float | Deferred]:
        """Milliseconds per phase (indexed like :data:`PHASES`); an open phase keeps running."""

    def take_moved_comm_ms(self) -> float | None:
        """Milliseconds of collectives taken out of non-comm phases since the previous call
        (so ``comm`` phase + this is all communication); None when the clock cannot tell."""


class NullPhaseClock:
    """No breakdown: only remembers when the first phase began (the first step's start)."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first = -1.0

    def begin(self, phase: int) -> None:
        """Remember the time of the first call."""
        if self.first < 0.0:
            self.first = _now()

    def end(self, phase: int) -> None:
        """Nothing to do."""

    def take(self, now: float) -> list[float | Deferred]:
        """Nothing measured."""
        return []

    def take_moved_comm_ms(self) -> float | None:
        """Nothing measured."""
        return None


class HostPhaseClock:
    """Phase clock on ``time.perf_counter`` (the CPU, where work is done when a call returns).

    ``comm_aware``: a comm source reports each host-timed collective to :meth:`add_comm_ms`;
    that time is taken out of the segment of a non-comm phase it ran in. Reported, not polled:
    a collective costs one call, and a phase change none.
    """

    __slots__ = (
        "_comm_aware",
        "_current",
        "_mark",
        "_moved",
        "_pending",
        "_stack",
        "_totals",
        "first",
    )

    def __init__(self, comm_aware: bool = False) -> None:
        self._totals = [0.0] * len(PHASES)
        self._current = _NONE
        self._stack: list[int] = []
        self._mark = 0.0
        self._comm_aware = comm_aware
        self._pending = 0.0  # seconds of collectives reported since the segment began
        self._moved = 0.0
        self.first = -1.0

    def add_comm_ms(self, ms: float) -> None:
        """A collective timed on the host took ``ms`` (called by the comm source)."""
        self._pending += ms * 1e-3

    def _close_segment(self, now: float) -> None:
        phase = self._current
        seconds = now - self._mark
        pending = self._pending
        if pending:
            self._pending = 0.0
            if phase != COMM:
                # a collective inside this phase (ZeRO's reduce hooks in backward) counts in
                # comm only: moved there, never more than the segment it ran in
                moved = min(max(seconds, 0.0), pending)
                seconds -= moved
                self._moved += moved
        if seconds > 0.0:
            self._totals[phase] += seconds
        self._mark = now

    def begin(self, phase: int) -> None:
        """Open ``phase``, pausing the one open until now."""
        now = _now()
        current = self._current
        if current != _NONE:
            self._close_segment(now)
            self._stack.append(current)
        else:
            self._mark = now
            self._pending = 0.0  # collectives run while no phase was open: in no phase
            if self.first < 0.0:
                self.first = now
        self._current = phase

    def end(self, phase: int) -> None:
        """Close ``phase`` (and inner phases left open); the paused outer phase resumes."""
        if self._current == phase and not self._stack and not self._pending:
            seconds = _now() - self._mark  # the usual case, kept short
            if seconds > 0.0:
                self._totals[phase] += seconds
            self._current = _NONE
            return
        stack = self._stack
        if self._current != phase:
            if phase not in stack:
                return  # an end without its begin (a driver that sees only some hooks)
            now = _now()
            while self._current != phase:
                self._close_segment(now)
                self._current = stack.pop()
        else:
            now = _now()
        self._close_segment(now)
        self._current = stack.pop() if stack else _NONE

    def take(self, now: float) -> list[float | Deferred]:
        """Milliseconds per phase since the previous call; an open phase is cut at ``now``."""
        if self._current != _NONE:
            self._close_segment(now)
        totals = self._totals
        self._totals = [0.0] * len(PHASES)
        return [seconds * 1e3 for seconds in totals]

    def take_moved_comm_ms(self) -> float | None:
        """Collective time moved out of other phases since the previous call (None without a
        comm source: nothing is moved, and the comm phase is all the clock knows)."""
        if not self._comm_aware:
            return None
        moved, self._moved = self._moved, 0.0
        return moved * 1e3


class DevicePhaseClock:
    """Phase clock of span timers: CUDA events for the device phases, the host for the waits
    (data, between steps)."""

    __slots__ = ("_current", "_stack", "_timers", "first")

    def __init__(self, timers: list[SpanTimer]) -> None:
        self._timers = timers
        self._current = _NONE
        self._stack: list[int] = []
        self.first = -1.0

    def begin(self, phase: int) -> None:
        """Open ``phase``, pausing the one open until now."""
        current = self._current
        if current != _NONE:
            self._timers[current].stop()
            self._stack.append(current)
        elif self.first < 0.0:
            self.first = _now()
        self._timers[phase].start()
        self._current = phase

    def end(self, phase: int) -> None:
        """Close ``phase`` (and inner phases left open); the paused outer phase resumes."""
        stack = self._stack
        timers = self._timers
        if self._current != phase and phase not in stack:
            return
        while True:
            current = self._current
            timers[current].stop()
            self._current = stack.pop() if stack else _NONE
            if current == phase:
                break
        if self._current != _NONE:
            timers[self._current].start()

    def take(self, now: float) -> list[float | Deferred]:
        """Each phase's total since the previous call (numbers or Deferred event spans)."""
        current = self._current
        if current != _NONE:
            self._timers[current].stop()
            self._timers[current].start()
        return [timer.take() for timer in self._timers]

    def take_moved_comm_ms(self) -> float | None:
        """Device spans cannot be split by host-timed collectives: unknown."""
        return None


class CommSource(Protocol):
    """Where the step's collective time comes from (:class:`trainmon.collect.comms.CommsLogger`)."""

    def take_step_comm_ms(self) -> float | Deferred:
        """Milliseconds in collectives since the previous call."""

    def watch_host_comm(self, watcher: Callable[[float], None] | None) -> None:
        """Call ``watcher(ms)`` after each collective timed on the host (None: stop)."""


def phase_clock(device: Any, comm: CommSource | None, breakdown: bool = True) -> PhaseClock:
    """A host clock, on a CUDA device event timers for all phases but data and between-steps
    (host waits), or (without the breakdown) a clock that only notes the first step's start."""
    if not breakdown:
        return NullPhaseClock()
    if getattr(device, "type", None) == "cuda":
        timers = span_timers(device, len(PHASES))
        timers[DATA] = HostSpanTimer()
        timers[BETWEEN] = HostSpanTimer()
        return DevicePhaseClock(timers)
    clock = HostPhaseClock(comm_aware=comm is not None)
    if comm is not None:
        comm.watch_host_comm(clock.add_comm_ms)
    return clock
