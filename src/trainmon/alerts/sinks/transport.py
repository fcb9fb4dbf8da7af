"""HTTP delivery and secrets read at delivery time, shared by the HTTP sinks (standard library
only; errors become :class:`~trainmon.alerts.delivery.DeliveryError`, retried or not)."""

from __future__ import annotations

import base64
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from trainmon import redact
from trainmon.alerts.delivery import DeliveryError

_MAX_RESPONSE_BYTES = 64 * 1024


def http_send(
    url: str, body: bytes, *, headers: Mapping[str, str], timeout_s: float, method: str = "POST"
) -> bytes:
    """Send ``body`` and return the response body; errors become :class:`DeliveryError`
    (retried for network errors, 5xx, 408 and 429; not for other 4xx).

    A ``user:password@`` in ``url`` is sent as a Basic ``Authorization`` header (percent-decoded,
    as ``requests`` does) and the connection goes to the host alone: ``urllib`` would take the
    user info for part of the host name and never connect. An ``Authorization`` in ``headers``
    wins over it. It is not resent on a redirect, which may lead to another host.
    """
    request = urllib.request.Request(redact.without_userinfo(url), data=body, method=method)
    request.add_header("Content-Type", "application/json; charset=utf-8")
    request.add_header("User-Agent", "trainmon-alerts")
    credentials = redact.userinfo(url)
    if credentials is not None and not any(k.lower() == "authorization" for k in headers):
        request.add_unredirected_header("Authorization", basic_authorization(*credentials))
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


def basic_authorization(user: str, password: str) -> str:
    """The value of a Basic ``Authorization`` header (RFC 7617, UTF-8)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def env_value(name: str | None, what: str) -> str | None:
    """The value of environment variable ``name`` (None when no name), read at delivery."""
    if name is None:
        return None
    value = os.environ.get(name)
    if value is None:
        raise DeliveryError(f"environment variable {name} ({what}) is not set", retry=False)
    return value
