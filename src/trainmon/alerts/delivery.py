"""Delivering alerts off the training thread: the sink contract and the dispatcher.

A sink only formats and sends one alert (:meth:`AlertSink.deliver`). The
:class:`AlertDispatcher` owns the rest: a queue per sink, one daemon thread per sink (so a
slow or unreachable sink delays only itself), retries with exponential back-off, a failure
counter per sink, and one warning the first time a sink gives an alert up. Alerts reach each
sink in the order they were submitted, so a ``resolved`` never overtakes its ``firing``.
"""

from __future__ import annotations

import abc
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import ClassVar

from trainmon import redact
from trainmon.core.alert import Alert
from trainmon.logging import get_logger

_log = get_logger("alerts")

DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 4.0
DEFAULT_MAX_PENDING = 1000


class DeliveryError(Exception):
    """A sink could not deliver an alert; ``retry=False`` when trying again cannot help
    (a rejected request, a bad signature, a missing credential)."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class AlertSink(abc.ABC):
    """One destination for alerts. ``deliver`` runs on the sink's own dispatcher thread, one
    alert at a time, and raises (preferably :class:`DeliveryError`) when it did not deliver."""

    kind: ClassVar[str] = "sink"
    name: str = ""
    """Key of this sink in :attr:`AlertDispatcher.failures`, e.g. ``"webhook[2]"``."""
    target: str = ""
    """Where it delivers, fit to print: no credential, token or secret."""

    @abc.abstractmethod
    def deliver(self, alert: Alert) -> None:
        """Send one alert; return only once it was accepted."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, connections); called once, after the last delivery."""

    def secrets(self) -> Sequence[str]:
        """Strings that must never be printed (scrubbed from every message about this sink)."""
        return ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.target}>"


class _Lane:
    """One sink's queue and thread; ``pending`` is guarded by the dispatcher's condition."""

    def __init__(self, sink: AlertSink) -> None:
        self.sink = sink
        self.pending: deque[Alert] = deque()
        self.reported = False
        self.reported_full = False
        self.thread: threading.Thread | None = None


class AlertDispatcher:
    """Queues alerts for delivery by every sink, off the calling thread.

    :meth:`submit` never blocks on I/O and never raises. Each sink retries an alert up to
    ``attempts`` times, waiting ``backoff_s``, then twice as long each time (at most
    ``max_backoff_s``); an alert it still cannot deliver is given up and counted in
    :attr:`failures`, and the first give-up of each sink is logged once. A sink that queues
    more than ``max_pending`` alerts drops new ones (counted in :attr:`failures` too).
    """

    def __init__(
        self,
        sinks: Sequence[AlertSink],
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_s: float = DEFAULT_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts = {attempts!r}: expected an integer >= 1")
        self.sinks = list(sinks)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_pending = max_pending
        self.failures: dict[str, int] = {sink.name: 0 for sink in self.sinks}
        """Per sink name: alerts it gave up (after all attempts) or dropped (queue full)."""
        self._cond = threading.Condition()
        self._lanes = [_Lane(sink) for sink in self.sinks]
        self._outstanding = 0
        self._closing = False
        self._deadline = math.inf
        for lane in self._lanes:
            lane.thread = threading.Thread(
                target=self._serve, args=(lane,), name=f"trainmon-alerts-{lane.sink.name}"
            )
            lane.thread.daemon = True
            lane.thread.start()

    # --- the caller's side -------------------------------------------------------------------

    def submit(self, alert: Alert) -> None:
        """Queue ``alert`` for every sink and return at once; dropped after :meth:`close`.
        A sink whose queue is full loses it: counted in :attr:`failures`, reported once."""
        full: list[_Lane] = []
        try:
            with self._cond:
                if self._closing:
                    return
                for lane in self._lanes:
                    if len(lane.pending) >= self.max_pending:
                        self.failures[lane.sink.name] += 1
                        if not lane.reported_full:
                            lane.reported_full = True
                            full.append(lane)
                        continue
                    lane.pending.append(alert)
                    self._outstanding += 1
                self._cond.notify_all()
        except Exception:  # never raise into the caller (the rules engine, the watchdog)
            pass
        for lane in full:
            _log.warning(
                "alert sink %s (%s %s) is not delivering and holds %d alerts: dropping alert %r "
                "and further ones while it is full; the other sinks and training carry on "
                "(dropped alerts are counted in AlertDispatcher.failures, not printed)",
                lane.sink.name,
                lane.sink.kind,
                _scrub(lane, lane.sink.target),
                self.max_pending,
                alert.rule,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued alert was delivered or given up; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (retries included) for at most ``timeout`` seconds, give up
        the rest, and stop the threads. Calling it again only waits for them again."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + max(0.0, timeout)
            deadline = self._deadline
            self._cond.notify_all()
        for lane in self._lanes:
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))

    def undelivered(self) -> dict[str, int]:
        """Per sink name: alerts given up, dropped, or still queued (after :meth:`close`)."""
        with self._cond:
            return {
                lane.sink.name: self.failures[lane.sink.name] + len(lane.pending)
                for lane in self._lanes
            }

    @property
    def pending(self) -> int:
        """Deliveries (alert x sink) not yet done or given up."""
        return self._outstanding

    def __enter__(self) -> AlertDispatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- each sink's thread ------------------------------------------------------------------

    def _serve(self, lane: _Lane) -> None:
        try:
            while True:
                with self._cond:
                    while not lane.pending and not self._closing:
                        self._cond.wait()
                    if not lane.pending:
                        return
                    alert = lane.pending[0]
                try:
                    self._deliver(lane, alert)
                except Exception:  # _deliver handles sink errors; this keeps the thread alive
                    pass
                finally:
                    with self._cond:
                        lane.pending.popleft()
                        self._outstanding -= 1
                        self._cond.notify_all()
        finally:
            try:
                lane.sink.close()
            except Exception as exc:
                _log.warning("alert sink %s: close failed: %s", lane.sink.name, _scrub(lane, exc))

    def _deliver(self, lane: _Lane, alert: Alert) -> None:
        """Try ``alert`` until it is delivered, refused for good, out of attempts or of time."""
        attempt = 0
        while True:
            if time.monotonic() >= self._deadline:
                self._give_up(lane, alert, attempt, "the dispatcher closed before delivery")
                return
            attempt += 1
            try:
                lane.sink.deliver(alert)
                return
            except Exception as exc:
                reason = _scrub(lane, exc)
                retry = getattr(exc, "retry", True)
                if not retry or attempt >= self.attempts:
                    self._give_up(lane, alert, attempt, reason)
                    return
                _log.debug("alert sink %s: attempt %d failed: %s", lane.sink.name, attempt, reason)
            delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
            self._back_off(delay)

    def _back_off(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less when close's deadline comes first."""
        end = time.monotonic() + delay
        with self._cond:
            while True:
                remaining = min(end, self._deadline) - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def _give_up(self, lane: _Lane, alert: Alert, attempts: int, reason: str) -> None:
        with self._cond:
            self.failures[lane.sink.name] += 1
            first = not lane.reported
            lane.reported = True
        if first:
            _log.warning(
                "alert sink %s (%s %s) could not deliver alert %r after %d attempt(s): %s; "
                "alerts to this sink are being lost, the other sinks and training carry on "
                "(further failures are counted in AlertDispatcher.failures, not printed)",
                lane.sink.name,
                lane.sink.kind,
                _scrub(lane, lane.sink.target),
                alert.rule,
                attempts,
                reason,
            )


def _scrub(lane: _Lane, exc: BaseException | str) -> str:
    """``exc`` as text, with every secret of the lane's sink replaced by ``***``."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return redact.text(text, lane.sink.secrets())
