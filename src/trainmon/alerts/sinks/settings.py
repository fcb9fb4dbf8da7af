"""``alerts.sinks`` checked and built: every mistake is a ConfigError naming
``alerts.sinks[i].<key>``, at start-up rather than as a lost alert later."""

from __future__ import annotations

import math
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from trainmon import redact
from trainmon.alerts.delivery import AlertDispatcher, AlertSink
from trainmon.alerts.model import ALERTS_FILE
from trainmon.alerts.sinks.local import ConsoleSink, FileSink
from trainmon.alerts.sinks.prometheus import AlertmanagerSink, PushgatewaySink
from trainmon.alerts.sinks.smtp import SECURITY, EmailSink
from trainmon.alerts.sinks.webhook import WEBHOOK_FORMATS, WebhookSink
from trainmon.errors import ConfigError, did_you_mean

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
