"""The narrow interface the layers above the core use of a Monitor.

Producers (timers, the step instrument, comms, layer stats) and the alert system are built and
handed the Monitor by the composition root (``trainmon/monitor.py``), which sits above them; so
they name this protocol instead of the class, and no layer imports upward.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from trainmon.config import TrainmonConfig
from trainmon.core.callbacks import Callback
from trainmon.core.entries import Item
from trainmon.core.observer import Observer
from trainmon.core.place import ProcessPlace


class MonitorHandle(Protocol):
    """What trainmon's own producers and alert system use of :class:`trainmon.Monitor`."""

    config: TrainmonConfig
    place: ProcessPlace
    log_rank: int
    callbacks: list[Callback]

    @property
    def step(self) -> int:
        """The step at which ``(name, value)`` events are recorded."""

    @step.setter
    def step(self, value: int) -> None: ...

    @property
    def stop_reason(self) -> str | None:
        """Why a stop was requested, or None."""

    def emit_checked(self, items: tuple[Item, ...], resolve: bool = True) -> None:
        """Queue already-checked ``(name, value)`` pairs at :attr:`step`."""

    def write_events(self, events: Iterable[Item]) -> None:
        """Record ``(name, value[, step])`` tuples, checked at the call."""

    def record_span(self, kind: str, start_time: float, end_time: float) -> None:
        """Journal a span (evaluation, checkpoint) of wall time."""

    def add_observer(self, observer: Observer) -> None:
        """Watch the stream on the background thread."""

    def progress(self) -> tuple[int, int]:
        """``(step, events queued or dropped)``: what the stall watchdog reads."""

    def request_stop(self, reason: str) -> None:
        """Ask training to stop at the next step boundary."""
