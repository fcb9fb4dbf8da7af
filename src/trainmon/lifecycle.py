"""Process exit: every open monitor is closed at interpreter exit and on SIGTERM, and learns
when it finds itself in a forked child.

Why a module of its own: these hooks are process-wide (one ``atexit``, one fork hook, one
SIGTERM handler for all monitors), while a monitor is one of possibly several in a process.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

from trainmon.core.writer import RunStatus
from trainmon.errors import TrainingStopped
from trainmon.logging import get_logger

_log = get_logger("monitor")


class Closeable(Protocol):
    """What the exit hooks need of a monitor."""

    def close(self, status: RunStatus = "success") -> None: ...


_live: weakref.WeakKeyDictionary[Closeable, weakref.WeakMethod[Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)
_hooks_installed = False


def run_status(exc: BaseException | None) -> RunStatus:
    """How a run ended, from the exception that ended it (None: it did not raise):
    interrupts, ``SystemExit`` with a non-zero code and :class:`TrainingStopped` are
    ``"aborted"``, any other exception ``"failed"``."""
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        return "success"
    if isinstance(exc, KeyboardInterrupt | SystemExit | TrainingStopped):
        return "aborted"
    return "failed"


def close_all(status: RunStatus | None = None) -> None:
    """Close every open monitor (run at interpreter exit and on SIGTERM). Without ``status``,
    a process ending on an uncaught exception (``sys.last_value``, set by the interpreter when
    it printed it) closes its monitors as failed."""
    if status is None:
        status = run_status(getattr(sys, "last_value", None))
    for monitor in list(_live):
        try:
            monitor.close(status)
        except Exception:
            _log.warning("closing %r failed", monitor, exc_info=True)


def register(monitor: Closeable, on_fork: Callable[[], None]) -> None:
    """Close ``monitor`` at exit and on SIGTERM, and call ``on_fork`` (a bound method of it)
    in a forked child; held weakly, so a dropped monitor is forgotten."""
    global _hooks_installed
    _live[monitor] = weakref.WeakMethod(on_fork)
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(close_all)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    # Only take SIGTERM when nobody else has: a user's or a framework's handler wins.
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def unregister(monitor: Closeable) -> None:
    """A closed monitor needs no exit hook."""
    _live.pop(monitor, None)


def _after_fork_in_child() -> None:
    for on_fork in list(_live.values()):
        call = on_fork()
        if call is not None:
            call()


def _on_sigterm(signum: int, frame: object) -> None:
    close_all("aborted")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def why_unwritable(reason: str, created_in_pid: int, dropped: int) -> str:
    """The one warning for events logged when nothing can write them (``reason``:
    ``"closed"`` or ``"forked"``)."""
    if reason == "closed":
        why = "it is closed: events logged after close() are not written"
    else:
        why = (
            f"this process ({os.getpid()}) is a fork of the one that created it "
            f"({created_in_pid}), where its background writer runs: events logged here are not "
            f"written; create a Monitor in the child instead"
        )
    return (
        f"{why} ({dropped} dropped so far, counted in Monitor.dropped_events; "
        f"this warning is shown once)"
    )
