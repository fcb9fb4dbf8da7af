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
#: :data:`~trainmon.core.values.CAPTURED` where a captured tensor's value or step goes).
Entry = tuple[Any, Any, Sequence[Item], "bool | Snapshot"]


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
