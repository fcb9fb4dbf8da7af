"""What travels through the pipeline's queue: scalar entries (plain tuples, the hot path) and
the control entries the background thread tells apart by type."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from trainmon.core.events import Number
from trainmon.core.lanes import FlushBarrier
from trainmon.core.values import Snapshot

Item = Sequence[Any]  # (name, value) or (name, value, step), already checked at the call site
#: One call's scalars, ``(wall time, default step, items, needs_resolving)``: a plain tuple, the
#: cheapest thing the training thread can build. ``needs_resolving`` is False for plain numbers,
#: True when values are tensors, numpy scalars or :class:`~trainmon.core.values.Deferred`, or
#: the call's :class:`~trainmon.core.values.Snapshot` (items then hold
#: :data:`~trainmon.core.values.CAPTURED` where a captured tensor's value or step goes). A call
#: whose values are all tensors at one step travels as its names alone (a tuple of ``str``)
#: with the Snapshot, or on the CPU with the key (a ``str``) under which its copy waits in the
#: pipeline's :class:`~trainmon.core.capture_store.CaptureStore`: tuples that hold tensors stay
#: tracked by the garbage collector, and a queue of them, outliving the young collections, sets
#: off full collections of the process.
Entry = tuple[Any, Any, Sequence[Any], "bool | Snapshot | str"]


def names_only(items: Sequence[Any]) -> bool:
    """True for a call that travels as its names alone (see :data:`Entry`)."""
    return type(items[0]) is str


def one_step(items: Sequence[Any]) -> bool:
    """True when all of an entry's values are at the entry's own step: names alone, or
    ``(name, value)`` pairs (the first item tells: a call is checked as a whole)."""
    first = items[0]
    return type(first) is str or len(first) == 2


def open_step(batch: list[Entry], before: Any = None) -> int:
    """Where the batch's newest step begins: its last calls of ``(name, value)`` pairs at the
    last call's step, which a later call of that step may still join (``len(batch)``: none,
    the last call logs at steps of its own). With ``before`` (the step of an extra queued
    next, None: it has none), none either when the extra is at a later step: the extra then
    comes after them, so that no writer sees a step go back."""
    if not batch:
        return 0
    step = batch[-1][1]
    if before is not None and before > step:
        return len(batch)
    start = len(batch)
    while start > 0:
        entry = batch[start - 1]
        if entry[1] != step or not entry[2] or not one_step(entry[2]):
            break
        start -= 1
    return start


class SideEvents:
    """Control entry: ``(name, value, step)`` events on their own x axis, for some writers only
    (see :meth:`Pipeline.put_side`)."""

    __slots__ = ("items", "kinds", "needs_resolving", "wall_time")

    def __init__(
        self,
        wall_time: float,
        items: Sequence[Item],
        kinds: frozenset[str],
        needs_resolving: bool | Snapshot,
    ) -> None:
        self.wall_time = wall_time
        self.items = items
        self.kinds = kinds
        self.needs_resolving = needs_resolving


class SampledValues:
    """Control entry: values sampled off the training thread (``sys/*``), placed at the step
    the stream has reached when the background thread comes to them (see
    :meth:`Pipeline.put_sampled`)."""

    __slots__ = ("items", "wall_time")

    def __init__(self, wall_time: float, items: Sequence[tuple[str, Number]]) -> None:
        self.wall_time = wall_time
        self.items = items


class FlushRequest:
    """Control entry: the background thread runs its ``then`` at the flush point (an exception
    it raises is kept for the caller) and hands it the barrier to wait on."""

    def __init__(self, then: Callable[[], None] | None) -> None:
        self.reached = threading.Event()
        self.barrier: FlushBarrier | None = None
        self.then = then
        self.error: BaseException | None = None

    def run_then(self) -> None:
        if self.then is not None:
            try:
                self.then()
            except BaseException as exc:  # handed to the thread that asked for the flush
                self.error = exc
