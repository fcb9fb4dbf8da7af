"""Text fit to print about a sink or its config: no token, password or signing secret in it.

Chat webhooks carry their token in the URL path (Slack's ``/services/T…/B…/XXXX``), DingTalk
and many others in the query (``access_token=…``), and servers echo both back in error bodies.
So wherever a URL, header or response body is printed (warnings, ``ConfigError`` messages,
``trainmon validate``, ``repr``), it goes through this module first:

* :func:`url` keeps the scheme, host and port, and replaces the user info, path, query and
  fragment by ``***`` (``https://hooks.slack.com/***``);
* :func:`text` replaces every URL it finds that way, every ``token=…``-style parameter, and
  every string of the caller's own ``secrets`` (with its URL-quoted and JSON-escaped forms);
* :func:`credentials` (:func:`credentials_in` for every URL of a text) masks only the user
  info and secret-looking query values, keeping the path: for URIs whose path names a store,
  not a secret (an MLflow tracking URI, or an SDK's error quoting it);
* :func:`without_userinfo` and :func:`userinfo` split ``user:password@`` off a URL, so that
  senders connect to the host alone and send the credentials as a Basic header;
* :func:`url_secrets` lists the parts of a URL that :func:`text` must hide when they come back
  on their own (a 4xx body quoting the path, for instance).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_PARAM = re.compile(
    r"(?i)\b((?:access_?)?token|secret|sign(?:ature)?|password|passwd|pwd|api_?key|key|auth"
    r"|authorization|credential|session|sig)=([^&\s'\"<>]+)"
)
_MIN_SECRET = 4


def url(value: str) -> str:
    """``scheme://host[:port]/***``: the URL without user info, path, query or fragment."""
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # an out-of-range port, a broken IPv6 literal: no parsing to lean on
        scheme, sep, rest = value.partition("://")
        if not sep:
            return MASK
        netloc = re.split(r"[/?#]", rest, maxsplit=1)[0].rsplit("@", 1)[-1]
        hidden = len(rest) > len(netloc) or "@" in rest
        return f"{scheme}://{netloc}" + (f"/{MASK}" if hidden else "")
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port else "")
    hidden = bool(parts.path.strip("/") or parts.query or parts.fragment or parts.username)
    return f"{parts.scheme}://{netloc}" + (f"/{MASK}" if hidden else "")


def credentials(value: str) -> str:
    """``value`` with its user info (``user:password@``) and ``token=…``-style query values
    masked; scheme, host, port and path kept."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return _PARAM.sub(lambda m: f"{m.group(1)}={MASK}", value)
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        authority = MASK + "@" + authority.rsplit("@", 1)[1]
    tail = _PARAM.sub(lambda m: f"{m.group(1)}={MASK}", tail)
    return f"{scheme}://{authority}{slash}{tail}"


def credentials_in(value: str) -> str:
    """``value`` with :func:`credentials` applied to every URL in it (paths kept)."""
    return _URL.sub(lambda m: credentials(m.group(0)), value)


def without_userinfo(value: str) -> str:
    """``value`` with any ``user:password@`` removed: a URL fit for a plain HTTP probe."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value
    # the authority ends at the first "/", "?" or "#" (an "@" in the query is not user info)
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return f"{scheme}{sep}{rest[:end].rsplit('@', 1)[-1]}{rest[end:]}"


def userinfo(value: str) -> tuple[str, str] | None:
    """The percent-decoded ``(user, password)`` of ``value``'s ``user:password@`` ("" for a
    missing password), or None when it has none: HTTP senders turn it into a Basic
    ``Authorization`` header, as ``requests`` and ``curl`` do, since ``http.client`` would
    take it for part of the host name."""
    try:
        parts = urllib.parse.urlsplit(value)
        user, password = parts.username, parts.password
    except ValueError:
        return None
    if user is None:
        return None
    return urllib.parse.unquote(user), urllib.parse.unquote(password or "")


def url_secrets(value: str) -> list[str]:
    """The parts of ``value`` that must not be printed even on their own: the path and each
    of its segments, the query and each of its values, the password."""
    try:
        parts = urllib.parse.urlsplit(value)
        password = parts.password
    except ValueError:
        return [value]
    password = password or ""
    found = [value, parts.path, parts.query, parts.fragment, password]
    found.append(urllib.parse.unquote(password))  # as sent in the Basic header
    found += [s for s in parts.path.split("/") if s]
    found += [v for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    return [s for s in found if len(s) >= _MIN_SECRET and s.strip("/")]


def text(value: str, secrets: Iterable[str] = ()) -> str:
    """``value`` with every URL, ``token=…`` parameter and string of ``secrets`` masked."""
    forms: set[str] = set()
    for secret in secrets:
        if not secret or len(secret) < _MIN_SECRET:
            continue
        forms.add(secret)
        forms.add(urllib.parse.quote(secret, safe=""))
        forms.add(urllib.parse.quote(secret, safe="/"))
        forms.add(urllib.parse.quote_plus(secret))
        forms.add(json.dumps(secret)[1:-1])
        forms.add(json.dumps(secret)[1:-1].replace("/", "\\/"))
    for secret in sorted(forms, key=len, reverse=True):
        value = value.replace(secret, MASK)
    value = _URL.sub(lambda m: url(m.group(0)), value)
    return _PARAM.sub(lambda m: f"{m.group(1)}={MASK}", value)


def shown(obj: Any) -> str:
    """``repr(obj)`` fit for an error message: URLs masked; a mapping (headers) shows its keys
    with every value masked."""
    if isinstance(obj, Mapping):
        return "{" + ", ".join(f"{k!r}: {MASK!r}" for k in obj) + "}"
    return text(repr(obj))
