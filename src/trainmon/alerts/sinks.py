"""Alert sinks: where alerts go (console, file, webhooks, e-mail, Prometheus), built from config.

:func:`build_dispatcher` checks the ``alerts.sinks`` list at start-up (a bad entry is a
:class:`~trainmon.errors.ConfigError` naming ``alerts.sinks[i].<key>``) and returns an
:class:`~trainmon.alerts.delivery.AlertDispatcher` that delivers on its own threads. Only the
standard library is used (``urllib.request`` for HTTP, ``smtplib`` for e-mail). Credentials
are read from environment variables at delivery time and are never logged or written.

Sink settings (every entry also has ``"type"``):

* ``console``: one line per alert on stderr, through the ``trainmon`` logger.
* ``file``: ``path`` (default ``<run_dir>/alerts.jsonl``; relative paths are inside run_dir):
  one JSON line per alert, :meth:`Alert.as_dict` with NaN/±Inf as strings.
* ``webhook``: ``url``, ``format`` (``json`` | ``slack`` | ``dingtalk`` | ``feishu``),
  ``secret_env`` (signing secret for dingtalk/feishu), ``msgtype`` (dingtalk: ``markdown`` |
  ``text``), ``headers``, ``timeout_s`` (5).
* ``email``: ``host``, ``port`` (25 / 587 / 465 by security), ``security`` (``plain`` |
  ``starttls`` | ``ssl``; default starttls), ``sender``, ``to``, ``username_env``,
  ``password_env``, ``tls_verify`` (true), ``ca_file``, ``timeout_s`` (10).
* ``pushgateway``: ``url``, ``job`` (default: the run's job), ``timeout_s`` (5): gauge
  ``trainmon_alert{rule, severity}`` 1 while firing, 0 once resolved, grouping key job + rank.
* ``alertmanager``: ``url``, ``timeout_s`` (5): POST ``/api/v2/alerts``; a resolved alert is
  sent again with ``endsAt`` = now, which is how Alertmanager resolves alerts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import logging
import math
import os
import re
import smtplib
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any, NoReturn

from trainmon import redact
from trainmon.alerts.delivery import AlertDispatcher, AlertSink, DeliveryError
from trainmon.alerts.model import ALERTS_FILE, Alert
from trainmon.errors import ConfigError, did_you_mean
from trainmon.logging import get_logger
from trainmon.writers.files import AppendFile

__all__ = [
    "AlertDispatcher",
    "AlertSink",
    "AlertmanagerSink",
    "ConsoleSink",
    "DeliveryError",
    "EmailSink",
    "FileSink",
    "PushgatewaySink",
    "WebhookSink",
    "build_dispatcher",
    "build_sinks",
]

_console_log = get_logger("alerts")
_MAX_RESPONSE_BYTES = 64 * 1024


# --- how an alert reads ---------------------------------------------------------------------


def _now_or(alert: Alert) -> float:
    return alert.time if alert.time > 0 else time.time()


def _iso(t: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager and people expect."""
    text = datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _json_ready(value: Any) -> Any:
    """``value`` with NaN/±Inf as the journal's strings, so the result is standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(_json_ready(obj), ensure_ascii=False, allow_nan=False, default=str).encode()


def _title(alert: Alert) -> str:
    """``[FIRING] grad-explosion (critical)``: the subject line of every human format."""
    return f"[{alert.state.upper()}] {alert.rule} ({alert.severity})"


def _facts(alert: Alert) -> list[tuple[str, str]]:
    """The alert's facts as (name, text) pairs, empty ones left out."""
    facts = [("job", alert.job), ("rank", str(alert.rank)), ("kind", alert.kind)]
    if alert.metric is not None:
        facts.append(("metric", alert.metric))
    if alert.value is not None:
        facts.append(("value", f"{alert.value:.6g}"))
    if alert.step is not None:
        facts.append(("step", str(alert.step)))
    facts.append(("time", _iso(_now_or(alert))))
    facts += [(str(k), str(v)) for k, v in alert.labels.items()]
    facts += [(str(k), str(v)) for k, v in alert.details.items()]
    return [(k, v) for k, v in facts if v != ""]


def _plain_text(alert: Alert) -> str:
    lines = [f"trainmon {_title(alert)}", alert.message, ""]
    lines += [f"{name}: {text}" for name, text in _facts(alert)]
    return "\n".join(lines)


def _markdown(alert: Alert) -> str:
    lines = [f"#### trainmon {_title(alert)}", "", f"> {alert.message}", ""]
    lines += [f"- **{name}**: {text}" for name, text in _facts(alert)]
    return "\n".join(lines)


# --- HTTP -----------------------------------------------------------------------------------


def _http(
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


def _env(name: str | None, what: str) -> str | None:
    """The value of environment variable ``name`` (None when no name), read at delivery."""
    if name is None:
        return None
    value = os.environ.get(name)
    if value is None:
        raise DeliveryError(f"environment variable {name} ({what}) is not set", retry=False)
    return value


# --- the sinks ------------------------------------------------------------------------------


class ConsoleSink(AlertSink):
    """One line per alert on stderr, through the ``trainmon`` logger (rank-stamped)."""

    kind = "console"

    def __init__(self) -> None:
        self.target = "trainmon logger"

    def deliver(self, alert: Alert) -> None:
        if alert.state == "resolved":
            level = logging.INFO
        else:
            level = logging.ERROR if alert.severity == "critical" else logging.WARNING
        _console_log.log(level, "ALERT %s: %s", _title(alert), alert.message)


class FileSink(AlertSink):
    """``alerts.jsonl``: one JSON object per alert (:meth:`Alert.as_dict`), append-only,
    each line handed to the OS whole so a killed process leaves whole lines."""

    kind = "file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = str(path)
        self._file: AppendFile | None = None

    def deliver(self, alert: Alert) -> None:
        if self._file is None:
            self._file = AppendFile(self.path)
            if not self._file.ends_with_newline():
                self._file.write(b"\n")
        self._file.write(_json_bytes(alert.as_dict()) + b"\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


WEBHOOK_FORMATS = ("json", "slack", "dingtalk", "feishu")


class WebhookSink(AlertSink):
    """An HTTP POST per alert: generic JSON, Slack, DingTalk or Feishu/Lark custom bots.

    * ``json``: :meth:`Alert.as_dict` as the body.
    * ``slack``: an incoming webhook, ``{"text": ..., "blocks": [...]}``; ``text`` is the
      notification fallback when blocks are shown
      (https://api.slack.com/messaging/webhooks, https://api.slack.com/reference/block-kit).
    * ``dingtalk``: a custom robot, ``{"msgtype": "markdown", "markdown": {"title", "text"}}``
      or ``{"msgtype": "text", "text": {"content"}}``; signed mode adds ``timestamp`` (ms) and
      ``sign`` = urlencode(base64(HmacSHA256(key=secret, msg=f"{timestamp}\\n{secret}")))
      to the URL query; the reply is ``{"errcode": 0, ...}`` on success
      (https://open.dingtalk.com/document/robots/customize-robot-security-settings,
      https://open.dingtalk.com/document/orgapp/custom-robot-access).
    * ``feishu``: a Feishu/Lark custom bot, ``{"msg_type": "text", "content": {"text"}}``;
      signed mode adds ``timestamp`` (s, a string) and ``sign`` =
      base64(HmacSHA256(key=f"{timestamp}\\n{secret}", msg=b"")) to the body; the reply is
      ``{"code": 0, ...}`` on success
      (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot,
      https://open.larksuite.com/document/client-docs/bot-v3/add-custom-bot).
    """

    kind = "webhook"

    def __init__(
        self,
        url: str,
        *,
        format: str = "json",
        secret_env: str | None = None,
        msgtype: str = "markdown",
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.format = format
        self.secret_env = secret_env
        self.msgtype = msgtype
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        # any format: Slack-style URLs carry the token in the path, others in the query
        self.target = f"{format} {redact.url(url)}"

    def secrets(self) -> Sequence[str]:
        found = [*redact.url_secrets(self.url), *self.headers.values()]
        if self.secret_env and os.environ.get(self.secret_env):
            found.append(os.environ[self.secret_env])
        return [s for s in found if len(s) > 3]

    def deliver(self, alert: Alert) -> None:
        url = self.url
        secret = _env(self.secret_env, "the webhook signing secret")
        if self.format == "json":
            body: dict[str, Any] = alert.as_dict()
        elif self.format == "slack":
            body = self._slack(alert)
        elif self.format == "dingtalk":
            body = self._dingtalk(alert)
            if secret is not None:
                url = _add_query(url, dingtalk_sign(secret, int(time.time() * 1000)))
        else:
            body = {"msg_type": "text", "content": {"text": _plain_text(alert)}}
            if secret is not None:
                timestamp = int(time.time())
                body = {"timestamp": str(timestamp), "sign": feishu_sign(secret, timestamp), **body}
        reply = _http(url, _json_bytes(body), headers=self.headers, timeout_s=self.timeout_s)
        if self.format in ("dingtalk", "feishu"):
            _check_bot_reply(self.format, reply)

    @staticmethod
    def _slack(alert: Alert) -> dict[str, Any]:
        facts = "\n".join(f"*{name}*: {text}" for name, text in _facts(alert))
        return {
            "text": f"trainmon {_title(alert)}: {alert.message}",
            "blocks": [
                {
                    "type": "section",
                    "text": {
                        "type": "mrkdwn",
                        "text": f"*trainmon {_title(alert)}*\n{alert.message}",
                    },
                },
                {"type": "section", "text": {"type": "mrkdwn", "text": facts}},
            ],
        }

    def _dingtalk(self, alert: Alert) -> dict[str, Any]:
        if self.msgtype == "text":
            return {"msgtype": "text", "text": {"content": _plain_text(alert)}}
        return {
            "msgtype": "markdown",
            "markdown": {"title": f"trainmon {_title(alert)}", "text": _markdown(alert)},
        }


def dingtalk_sign(secret: str, timestamp_ms: int) -> dict[str, str]:
    """DingTalk's signed-robot query parameters ``timestamp`` and ``sign`` (base64, not yet
    URL-encoded: :func:`_add_query` encodes it, as the docs' ``quote_plus`` does)."""
    digest = hmac.new(
        secret.encode(), f"{timestamp_ms}\n{secret}".encode(), digestmod=hashlib.sha256
    ).digest()
    return {"timestamp": str(timestamp_ms), "sign": base64.b64encode(digest).decode()}


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark's custom-bot ``sign``: the key is ``f"{timestamp}\\n{secret}"``, the
    message empty."""
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", digestmod=hashlib.sha256).digest()).decode()


def _add_query(url: str, params: Mapping[str, str]) -> str:
    parts = urllib.parse.urlsplit(url)
    extra = urllib.parse.urlencode(params)  # quote_plus, as in DingTalk's example
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urllib.parse.urlunsplit(parts._replace(query=query))


def _check_bot_reply(format: str, reply: bytes) -> None:
    """DingTalk and Feishu answer HTTP 200 with an error code in the body: check it."""
    try:
        data = json.loads(reply or b"{}")
    except ValueError:
        return  # not JSON: nothing to check (a proxy or a test double)
    if not isinstance(data, dict):
        return
    if format == "dingtalk":
        code, text = data.get("errcode", 0), data.get("errmsg", "")
    else:
        code = data.get("code", data.get("StatusCode", 0))
        text = data.get("msg", data.get("StatusMessage", ""))
    if code not in (0, None):
        raise DeliveryError(f"{format} refused the message: code {code}: {text}", retry=False)


SECURITY = ("plain", "starttls", "ssl")
_DEFAULT_SMTP_PORT = {"plain": 25, "starttls": 587, "ssl": 465}


class EmailSink(AlertSink):
    """One e-mail per alert through SMTP (``smtplib``): plain, STARTTLS or implicit TLS.

    The login name and password come only from the environment variables named in the
    config, read at each delivery; they are never logged. TLS verifies the server against
    the system's CAs (or ``ca_file``) unless ``tls_verify`` is false; STARTTLS is required
    when asked for (never a silent downgrade to plain text).
    """

    kind = "email"

    def __init__(
        self,
        host: str,
        *,
        sender: str,
        to: Sequence[str],
        port: int | None = None,
        security: str = "starttls",
        username_env: str | None = None,
        password_env: str | None = None,
        tls_verify: bool = True,
        ca_file: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port or _DEFAULT_SMTP_PORT[security]
        self.security = security
        self.sender = sender
        self.to = list(to)
        self.username_env = username_env
        self.password_env = password_env
        self.tls_verify = tls_verify
        self.ca_file = ca_file
        self.timeout_s = timeout_s
        self.target = f"smtp {security} {host}:{self.port} to {', '.join(self.to)}"

    def secrets(self) -> Sequence[str]:
        names = (self.username_env, self.password_env)
        return [os.environ[n] for n in names if n and len(os.environ.get(n, "")) > 3]

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def message(self, alert: Alert) -> EmailMessage:
        """The e-mail for ``alert`` (subject: state, rule, severity, job and rank)."""
        msg = EmailMessage()
        where = f" - {alert.job} rank {alert.rank}" if alert.job else f" - rank {alert.rank}"
        msg["Subject"] = f"trainmon {_title(alert)}{where}"
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.to)
        msg["Date"] = formatdate(_now_or(alert), localtime=True)
        msg["Message-ID"] = make_msgid("trainmon")
        msg.set_content(_plain_text(alert) + "\n")
        return msg

    def deliver(self, alert: Alert) -> None:
        username = _env(self.username_env, "the SMTP login name")
        password = _env(self.password_env, "the SMTP password")
        msg = self.message(alert)
        try:
            smtp: smtplib.SMTP
            if self.security == "ssl":
                smtp = smtplib.SMTP_SSL(
                    self.host, self.port, timeout=self.timeout_s, context=self._tls()
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout_s)
            with smtp:
                if self.security == "starttls":
                    smtp.starttls(context=self._tls())
                if username is not None or password is not None:
                    smtp.login(username or "", password or "")
                smtp.send_message(msg, from_addr=self.sender, to_addrs=self.to)
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"SMTP login refused (code {exc.smtp_code})", retry=False) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise DeliveryError(f"SMTP server does not support it: {exc}", retry=False) from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused = ", ".join(exc.recipients)
            raise DeliveryError(f"SMTP server refused recipients {refused}", retry=False) from None
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryError(
                f"TLS certificate not trusted: {exc.verify_message}", retry=False
            ) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"SMTP {type(exc).__name__}: {exc}") from None


_PUSH_METRIC = "trainmon_alert"
_PUSH_HELP = "1 while a trainmon alert rule is firing, 0 once it resolved."


def _label_value(text: str) -> str:
    """A Prometheus text-format label value: backslash, quote and newline escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _grouping_part(name: str, value: str) -> str:
    """``/name/value`` of a Pushgateway grouping key; base64 (``name@base64``) when the value
    is empty or holds a ``/`` (https://github.com/prometheus/pushgateway#url)."""
    if value == "" or "/" in value:
        return f"/{name}@base64/{base64.urlsafe_b64encode(value.encode()).decode() or '='}"
    return f"/{name}/{urllib.parse.quote(value, safe='')}"


class PushgatewaySink(AlertSink):
    """The gauge ``trainmon_alert{rule, severity}`` pushed to a Prometheus Pushgateway:
    1 while firing, 0 once resolved; grouping key ``job`` and ``rank`` (so ``job`` is a label
    of every series). Every push carries all rules seen so far with POST, which replaces only
    the ``trainmon_alert`` family of the group and keeps other metrics pushed there.
    Text exposition format: https://prometheus.io/docs/instrumenting/exposition_formats/.
    """

    kind = "pushgateway"

    def __init__(self, url: str, *, job: str, rank: int, timeout_s: float = 5.0) -> None:
        self.job = job
        self.rank = rank
        self.timeout_s = timeout_s
        base = url.rstrip("/")
        self.push_url = base + "/metrics" + _grouping_part("job", job)
        self.push_url += _grouping_part("rank", str(rank))
        self.url = url
        self.target = redact.url(url) + f" job={job} rank={rank}"
        self._states: dict[str, tuple[str, int]] = {}

    def secrets(self) -> Sequence[str]:
        return redact.url_secrets(self.url)

    def exposition(self) -> bytes:
        """The pushed text: HELP, TYPE and one sample per rule seen."""
        lines = [f"# HELP {_PUSH_METRIC} {_PUSH_HELP}", f"# TYPE {_PUSH_METRIC} gauge"]
        for rule, (severity, value) in sorted(self._states.items()):
            labels = f'rule="{_label_value(rule)}",severity="{_label_value(severity)}"'
            lines.append(f"{_PUSH_METRIC}{{{labels}}} {value}")
        return ("\n".join(lines) + "\n").encode()

    def deliver(self, alert: Alert) -> None:
        self._states[alert.rule] = (alert.severity, 1 if alert.state == "firing" else 0)
        _http(
            self.push_url,
            self.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            timeout_s=self.timeout_s,
        )


_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _label_name(name: str) -> str:
    cleaned = _LABEL_NAME.sub("_", name) or "_"
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


class AlertmanagerSink(AlertSink):
    """Alerts posted to Prometheus Alertmanager's ``POST /api/v2/alerts``: labels
    ``alertname`` (the rule), ``job``, ``rank``, ``severity`` and the alert's own labels;
    annotation ``summary`` (the message). A resolved alert is sent again with the same labels
    and ``endsAt`` = now, which is how Alertmanager resolves alerts
    (https://prometheus.io/docs/alerting/latest/clients/,
    https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml).
    """

    kind = "alertmanager"

    def __init__(self, url: str, *, job: str, timeout_s: float = 5.0) -> None:
        base = url.rstrip("/")
        self.post_url = base if base.endswith("/api/v2/alerts") else base + "/api/v2/alerts"
        self.job = job
        self.timeout_s = timeout_s
        self.url = url
        self.target = redact.url(url)
        self._firing: dict[tuple[str, str, int], tuple[dict[str, str], float]] = {}

    def secrets(self) -> Sequence[str]:
        return redact.url_secrets(self.url)

    def payload(self, alert: Alert) -> list[dict[str, Any]]:
        """The request body for ``alert`` (a list of one postable alert)."""
        key = (alert.rule, alert.job or self.job, alert.rank)
        if key in self._firing:
            labels, starts = self._firing[key]  # same labels: Alertmanager's identity
        else:
            labels = {_label_name(str(k)): str(v) for k, v in alert.labels.items()}
            labels.update(
                alertname=alert.rule, job=key[1], rank=str(alert.rank), severity=alert.severity
            )
            starts = _now_or(alert)
        body: dict[str, Any] = {
            "labels": labels,
            "annotations": {"summary": alert.message, "description": _plain_text(alert)},
            "startsAt": _iso(starts),
        }
        if alert.state == "firing":
            self._firing[key] = (labels, starts)
        else:
            self._firing.pop(key, None)
            body["endsAt"] = _iso(max(time.time(), starts))
        return [body]

    def deliver(self, alert: Alert) -> None:
        _http(self.post_url, _json_bytes(self.payload(alert)), headers={}, timeout_s=self.timeout_s)


# --- config ---------------------------------------------------------------------------------

_COMMON_KEYS = ("type",)
_SINK_KEYS: dict[str, tuple[str, ...]] = {
    "console": (),
    "file": ("path",),
    "webhook": ("url", "format", "secret_env", "msgtype", "headers", "timeout_s"),
    "email": (
        "host",
        "port",
        "security",
        "sender",
        "to",
        "username_env",
        "password_env",
        "tls_verify",
        "ca_file",
        "timeout_s",
    ),
    "pushgateway": ("url", "job", "timeout_s"),
    "alertmanager": ("url", "timeout_s"),
}
SINK_TYPES = tuple(_SINK_KEYS)


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


class _Entry:
    """One ``alerts.sinks[i]`` mapping being checked; every error names the key path."""

    def __init__(self, index: int, raw: Mapping[str, Any], kind: str) -> None:
        self.prefix = f"alerts.sinks[{index}]"
        self.raw = raw
        self.kind = kind

    def fail(self, key: str, expected: str) -> NoReturn:
        value = self.raw.get(key)
        raise ConfigError(f"{self.prefix}.{key} = {redact.shown(value)}: expected {expected}")

    def missing(self, key: str, example: str) -> NoReturn:
        raise ConfigError(
            f"{self.prefix}.{key} is missing: {_a(self.kind)} sink needs it, e.g. {example}"
        )

    def string(self, key: str, *, example: str | None = None) -> str | None:
        value = self.raw.get(key)
        if value is None:
            if example is not None:
                self.missing(key, example)
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "a non-empty string")
        return value

    def required(self, key: str, example: str) -> str:
        value = self.string(key, example=example)
        assert value is not None
        return value

    def url(self, key: str, example: str) -> str:
        value = self.required(key, example)
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.fail(key, f"an http:// or https:// URL, e.g. {example}")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            self.fail(key, "a URL whose port is an integer from 1 to 65535")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        value = self.raw.get(key, default)
        if value not in choices or not isinstance(value, str):
            extra = did_you_mean(str(value), list(choices), start="; ")
            self.fail(key, "one of " + ", ".join(repr(c) for c in choices) + extra)
        return value

    def seconds(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not 0 < value < math.inf:
            self.fail(key, "a number of seconds > 0")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, "true or false")
        return value

    def port(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
            self.fail(key, "an integer port from 1 to 65535")
        return value

    def env(self, key: str) -> str | None:
        """The name of an environment variable holding a credential; it must be set now."""
        name = self.string(key)
        if name is not None and name not in os.environ:
            raise ConfigError(
                f"{self.prefix}.{key} = {name!r}: the environment variable {name} is not set "
                f"(credentials are read only from the environment, never from the config)"
            )
        return name

    def str_list(self, key: str, example: str) -> list[str]:
        value = self.raw.get(key)
        if value is None:
            self.missing(key, example)
        if not isinstance(value, (list, tuple)) or not value:
            self.fail(key, f"a non-empty list of strings, e.g. {example}")
        if not all(isinstance(v, str) and v.strip() for v in value):
            self.fail(key, f"a list of non-empty strings, e.g. {example}")
        return list(value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self.raw.get(key, {})
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.fail(key, 'a mapping of header names to strings, e.g. {"X-Token": "..."}')
        return dict(value)


def _sink(index: int, raw: Any, *, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    prefix = f"alerts.sinks[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{prefix} = {redact.shown(raw)}: expected a mapping with a 'type' "
            f"(one of {', '.join(SINK_TYPES)})"
        )
    kind = raw.get("type")
    if kind is None:
        raise ConfigError(f"{prefix}.type is missing: expected one of {', '.join(SINK_TYPES)}")
    if kind not in _SINK_KEYS:
        extra = did_you_mean(str(kind), SINK_TYPES, cutoff=0.5, end=" ")
        raise ConfigError(
            f"{prefix}.type = {kind!r}: unknown sink type; {extra}"
            f"valid types: {', '.join(SINK_TYPES)}"
        )
    valid = _COMMON_KEYS + _SINK_KEYS[kind]
    for key in raw:
        if key not in valid:
            extra = did_you_mean(str(key), valid, cutoff=0.5, end=" ")
            raise ConfigError(
                f"unknown key {prefix}.{key}; {extra}valid keys of {_a(kind)} sink: "
                f"{', '.join(valid)}"
            )
    entry = _Entry(index, raw, kind)
    sink = _BUILDERS[kind](entry, run_dir, job, rank)
    sink.name = f"{kind}[{index}]"
    return sink


def _console(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    return ConsoleSink()


def _file(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    text = entry.string("path")
    if text is None:
        if run_dir is None:
            raise ConfigError(
                f"{entry.prefix}.path is missing and there is no run folder to put "
                f"{ALERTS_FILE} in (no jsonl/tensorboard/csv output is enabled); set a path"
            )
        return FileSink(run_dir / ALERTS_FILE)
    path = Path(text).expanduser()
    if not path.is_absolute() and run_dir is not None:
        path = run_dir / path
    if text.endswith(("/", os.sep)) or path.is_dir():
        path = path / ALERTS_FILE
    return FileSink(path)


def _webhook(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    url = entry.url("url", '"https://hooks.slack.com/services/T000/B000/XXXX"')
    fmt = entry.choice("format", WEBHOOK_FORMATS, "json")
    secret_env = entry.env("secret_env")
    if secret_env is not None and fmt not in ("dingtalk", "feishu"):
        entry.fail("secret_env", "no secret: only the dingtalk and feishu formats sign messages")
    if "msgtype" in entry.raw and fmt != "dingtalk":
        entry.fail("msgtype", "no msgtype: it is a setting of the dingtalk format")
    return WebhookSink(
        url,
        format=fmt,
        secret_env=secret_env,
        msgtype=entry.choice("msgtype", ("markdown", "text"), "markdown"),
        headers=entry.str_map("headers"),
        timeout_s=entry.seconds("timeout_s", 5.0),
    )


def _email(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    host = entry.required("host", '"smtp.example.com"')
    sender = entry.required("sender", '"trainmon@example.com"')
    to = entry.str_list("to", '["oncall@example.com"]')
    username_env = entry.env("username_env")
    password_env = entry.env("password_env")
    if (username_env is None) != (password_env is None):
        key = "password_env" if password_env is None else "username_env"
        entry.missing(key, '"SMTP_PASSWORD" (login needs both username_env and password_env)')
    ca_file = entry.string("ca_file")
    if ca_file is not None and not Path(ca_file).expanduser().is_file():
        entry.fail("ca_file", "the path of an existing PEM file of CA certificates")
    return EmailSink(
        host,
        sender=sender,
        to=to,
        port=entry.port("port"),
        security=entry.choice("security", SECURITY, "starttls"),
        username_env=username_env,
        password_env=password_env,
        tls_verify=entry.boolean("tls_verify", True),
        ca_file=None if ca_file is None else str(Path(ca_file).expanduser()),
        timeout_s=entry.seconds("timeout_s", 10.0),
    )


def _pushgateway(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    url = entry.url("url", '"http://pushgateway:9091"')
    return PushgatewaySink(
        url,
        job=entry.string("job") or job,
        rank=rank,
        timeout_s=entry.seconds("timeout_s", 5.0),
    )


def _alertmanager(entry: _Entry, run_dir: Path | None, job: str, rank: int) -> AlertSink:
    url = entry.url("url", '"http://alertmanager:9093"')
    return AlertmanagerSink(url, job=job, timeout_s=entry.seconds("timeout_s", 5.0))


_BUILDERS = {
    "console": _console,
    "file": _file,
    "webhook": _webhook,
    "email": _email,
    "pushgateway": _pushgateway,
    "alertmanager": _alertmanager,
}


def build_sinks(
    sinks: Sequence[Mapping[str, Any]], *, run_dir: Path | None, job: str, rank: int = 0
) -> list[AlertSink]:
    """Check the ``alerts.sinks`` entries and build one sink each (no I/O happens yet)."""
    if isinstance(sinks, (str, bytes)) or not isinstance(sinks, Sequence):
        raise ConfigError(
            f"alerts.sinks = {sinks!r}: expected a list of sink settings, "
            f'e.g. [{{"type": "console"}}]'
        )
    return [_sink(i, raw, run_dir=run_dir, job=job, rank=rank) for i, raw in enumerate(sinks)]


def build_dispatcher(
    sinks: Sequence[Mapping[str, Any]], *, run_dir: Path | None, job: str, rank: int = 0
) -> AlertDispatcher:
    """The dispatcher delivering to the configured sinks; a bad entry is a ConfigError now,
    at start-up, rather than a lost alert later."""
    return AlertDispatcher(build_sinks(sinks, run_dir=run_dir, job=job, rank=rank))
