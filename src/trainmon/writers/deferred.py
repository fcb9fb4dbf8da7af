"""A service writer started on its own lane's thread, so that creating a Monitor never waits
for a server: connecting, creating the run and the experiment happen at the writer's first
call, with bounded retries there; a backend that stays down is given up with one warning and
what it then misses is counted."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trainmon import redact
from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, StepScalars
from trainmon.core.writer import RunStatus, Writer
from trainmon.logging import get_logger

_log = get_logger("writers")
_AUTH_VALUE = re.compile(r"((?:Basic|Bearer|Token)\s+)[A-Za-z0-9+/=._~-]+", re.IGNORECASE)


def redact_message(message: str, secrets: Iterable[str] = ()) -> str:
    """``message`` (a server's response, an exception) with URLs, ``token=`` values,
    ``Authorization`` values and ``secrets`` masked."""
    return _AUTH_VALUE.sub(lambda m: m.group(1) + redact.MASK, redact.text(message, secrets))


def basic_auth_secrets(user: str | None, password: str | None) -> list[str]:
    """The password and the base64 ``user:password`` a Basic header carries."""
    if not password:
        return []
    token = base64.b64encode(f"{user or ''}:{password}".encode()).decode()
    return [password, token]


class DeferredWriter(Writer):
    """Builds the real writer with ``build()`` at its first call (on its lane's thread):
    ``attempts`` tries, ``backoff_s`` apart (doubling); then gives up with one warning."""

    def __init__(
        self,
        kind: str,
        location: str,
        build: Callable[[], Writer],
        *,
        attempts: int = 3,
        backoff_s: float = 1.0,
        secrets: Sequence[str] = (),
    ) -> None:
        self.kind = kind  # type: ignore[misc]  # the wrapped backend's kind, per instance
        self.location = location
        self._build = build
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._secrets = list(secrets)
        self._inner: Writer | None = None
        self._given_up = False
        self._missed = 0

    def _writer(self) -> Writer | None:
        if self._inner is not None or self._given_up:
            return self._inner
        delay = self._backoff_s
        error: BaseException | None = None
        for attempt in range(self._attempts):
            try:
                inner = self._build()
            except Exception as exc:
                error = exc
                if attempt + 1 < self._attempts:
                    time.sleep(delay)
                    delay *= 2
                continue
            inner.every = self.every
            self.location = inner.location
            self._inner = inner
            return inner
        self._given_up = True
        _log.warning(
            "%s writer (%s) given up: it could not start after %d attempts (%s: %s); the "
            "other writers and training carry on, what it misses is counted",
            self.kind,
            self.location,
            self._attempts,
            type(error).__name__,
            redact_message(str(error), self._secrets),
        )
        return None

    def write(self, records: Sequence[StepScalars]) -> None:
        inner = self._writer()
        if inner is None:
            self._missed += sum(len(record.values) for record in records)
        else:
            inner.write(records)

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        inner = self._writer()
        if inner is not None:
            inner.write_windows(windows)

    def write_extras(self, records: Sequence[Extra]) -> None:
        inner = self._writer()
        if inner is not None:
            inner.write_extras(records)

    def flush(self) -> None:
        inner = self._writer()
        if inner is not None:
            inner.flush()

    def finalize(self, status: RunStatus) -> None:
        if self._inner is not None:
            self._inner.finalize(status)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def identity(self) -> Mapping[str, Any] | None:
        inner = self._inner
        return inner.identity() if inner is not None else None

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:
        inner = self._writer()
        if inner is not None:
            inner.resume(step, identity)

    @property
    def dropped_events(self) -> int:
        inner = self._inner
        return self._missed + (int(inner.dropped_events) if inner is not None else 0)

    @property
    def inner(self) -> Writer | None:
        """The started writer (None before its first call or once given up)."""
        return self._inner
