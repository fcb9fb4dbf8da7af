"""HTTP delivery and secrets read at delivery time, shared by the HTTP sinks (standard library
only; errors become :class:`~trainmon.alerts.delivery.DeliveryError`, retried or not)."""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from trainmon.alerts.delivery import DeliveryError

_MAX_RESPONSE_BYTES = 64 * 1024


def http_send(
    url: str, body: bytes, *, headers: Mapping[str, str], timeout_s: float, method: str = "POST"
) -> bytes:
    """Send ``body`` and return the response body; errors become :class:`DeliveryError`
    (retried for network errors, 5xx, 408 and 429; not for other 4xx)."""
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Content-Type", "application/json; charset=utf-8")
    request.add_header("User-Agent", "trainmon-alerts")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        # build_opener reads the *_proxy variables now, so a changed environment is honoured
        with urllib.request.build_opener().open(request, timeout=timeout_s) as response:
            data: bytes = response.read(_MAX_RESPONSE_BYTES)
            return data
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise DeliveryError(
            f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else ""),
            retry=exc.code >= 500 or exc.code in (408, 429),
        ) from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"cannot connect: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None


def env_value(name: str | None, what: str) -> str | None:
    """The value of environment variable ``name`` (None when no name), read at delivery."""
    if name is None:
        return None
    value = os.environ.get(name)
    if value is None:
        raise DeliveryError(f"environment variable {name} ({what}) is not set", retry=False)
    return value
