"""Timers for the training thread: a context manager that is also a decorator.

Host timers read ``time.perf_counter`` twice and enqueue one number. Negative durations (a
clock stepping back) are clamped to zero, as prometheus_client's ``Timer`` does.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

P = ParamSpec("P")
R = TypeVar("R")


def timer_metric(name: str) -> str:
    """``"data"`` → ``"perf/data_ms"``; a name with a ``/`` is kept, with ``_ms`` added."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"timer name {name!r}: expected a non-empty string such as 'data'")
    base = name if "/" in name else f"perf/{name}"
    return base if base.endswith("_ms") else f"{base}_ms"


class Timer:
    """Times a block or a function in milliseconds and records it at the monitor's step."""

    __slots__ = ("_monitor", "_started", "metric")

    def __init__(self, monitor: MonitorHandle, name: str) -> None:
        self._monitor = monitor
        self.metric = timer_metric(name)
        self._started = 0.0

    def __enter__(self) -> Timer:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed_ms = max(0.0, (time.perf_counter() - self._started) * 1e3)
        self._monitor.emit_checked(((self.metric, elapsed_ms),), resolve=False)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            with Timer(self._monitor, self.metric):
                return func(*args, **kwargs)

        return timed
