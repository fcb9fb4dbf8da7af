"""``alerts.sinks`` built: the entries are checked by their settings classes in
:mod:`trainmon.config` (every mistake a ConfigError naming ``alerts.sinks[i].<key>``, at
start-up rather than as a lost alert later), then each becomes its sink."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainmon.alerts.delivery import AlertDispatcher, AlertSink
from trainmon.alerts.sinks.local import ConsoleSink, FileSink
from trainmon.alerts.sinks.prometheus import AlertmanagerSink, PushgatewaySink
from trainmon.alerts.sinks.smtp import EmailSink
from trainmon.alerts.sinks.webhook import WebhookSink
from trainmon.config import (
    SINK_SETTINGS,
    ConsoleSinkSettings,
    EmailSinkSettings,
    FileSinkSettings,
    PushgatewaySinkSettings,
    SinkSettings,
    WebhookSinkSettings,
    parse_sinks,
)
from trainmon.core.alert import ALERTS_FILE


def _sink(
    settings: SinkSettings, index: int, *, run_dir: Path | None, job: str, rank: int
) -> AlertSink:
    """The sink for one checked ``alerts.sinks[index]`` entry."""
    sink: AlertSink
    if isinstance(settings, ConsoleSinkSettings):
        sink = ConsoleSink()
    elif isinstance(settings, FileSinkSettings):
        sink = FileSink(_alerts_file(settings.path, run_dir))
    elif isinstance(settings, WebhookSinkSettings):
        sink = WebhookSink(
            settings.url,
            format=settings.format,
            secret_env=settings.secret_env,
            msgtype=settings.msgtype or "markdown",
            headers=dict(settings.headers),
            timeout_s=settings.timeout_s,
        )
    elif isinstance(settings, EmailSinkSettings):
        ca_file = settings.ca_file
        sink = EmailSink(
            settings.host,
            sender=settings.sender,
            to=list(settings.to),
            port=settings.port,
            security=settings.security,
            username_env=settings.username_env,
            password_env=settings.password_env,
            tls_verify=settings.tls_verify,
            ca_file=None if ca_file is None else str(Path(ca_file).expanduser()),
            timeout_s=settings.timeout_s,
        )
    elif isinstance(settings, PushgatewaySinkSettings):
        sink = PushgatewaySink(
            settings.url, job=settings.job or job, rank=rank, timeout_s=settings.timeout_s
        )
    else:
        sink = AlertmanagerSink(settings.url, job=job, timeout_s=settings.timeout_s)
    sink.name = f"{_TYPE_OF[type(settings)]}[{index}]"
    return sink


_TYPE_OF = {cls: kind for kind, cls in SINK_SETTINGS.items()}


def _alerts_file(text: str | None, run_dir: Path | None) -> Path:
    if text is None:
        assert run_dir is not None  # parse_sinks refused a file sink without a folder
        return run_dir / ALERTS_FILE
    path = Path(text).expanduser()
    if not path.is_absolute() and run_dir is not None:
        path = run_dir / path
    if text.endswith(("/", os.sep)) or path.is_dir():
        path = path / ALERTS_FILE
    return path


def build_sinks(
    sinks: Sequence[Mapping[str, Any]], *, run_dir: Path | None, job: str, rank: int = 0
) -> list[AlertSink]:
    """Check the ``alerts.sinks`` entries (:func:`trainmon.config.parse_sinks`) and build one
    sink each (no I/O happens yet)."""
    checked = parse_sinks(sinks, has_run_dir=run_dir is not None)
    return [_sink(s, i, run_dir=run_dir, job=job, rank=rank) for i, s in enumerate(checked)]


def build_dispatcher(
    sinks: Sequence[Mapping[str, Any]], *, run_dir: Path | None, job: str, rank: int = 0
) -> AlertDispatcher:
    """The dispatcher delivering to the configured sinks; a bad entry is a ConfigError now,
    at start-up, rather than a lost alert later."""
    return AlertDispatcher(build_sinks(sinks, run_dir=run_dir, job=job, rank=rank))
