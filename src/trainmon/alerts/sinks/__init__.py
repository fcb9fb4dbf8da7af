"""Alert sinks: where alerts go (console, file, webhooks, e-mail, Prometheus), built from config.

One module per family of sinks, :mod:`~trainmon.alerts.formatting` for how an alert reads,
:mod:`.transport` for HTTP and :mod:`.settings` to build the sinks from checked settings.

:func:`build_dispatcher` checks the ``alerts.sinks`` list at start-up (a bad entry is a
:class:`~trainmon.errors.ConfigError` naming ``alerts.sinks[i].<key>``) and returns an
:class:`~trainmon.alerts.delivery.AlertDispatcher` that delivers on its own threads. Only the
standard library is used (``urllib.request`` for HTTP, ``smtplib`` for e-mail). Credentials
are read from environment variables at delivery time and are never logged or written.

Each sink type's keys, with what they accept and their defaults, are declared once, by its
settings class in :mod:`trainmon.config` (``WebhookSinkSettings``, ...), and listed in the
README's Config reference under ``alerts.sinks[type=...]``.
"""

from trainmon.alerts.delivery import AlertDispatcher, AlertSink, DeliveryError
from trainmon.alerts.sinks.local import ConsoleSink, FileSink
from trainmon.alerts.sinks.prometheus import AlertmanagerSink, PushgatewaySink
from trainmon.alerts.sinks.settings import build_dispatcher, build_sinks
from trainmon.alerts.sinks.smtp import SECURITY, EmailSink
from trainmon.alerts.sinks.webhook import WEBHOOK_FORMATS, WebhookSink, dingtalk_sign, feishu_sign
from trainmon.config import SINK_TYPES

__all__ = [
    "SECURITY",
    "SINK_TYPES",
    "WEBHOOK_FORMATS",
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
    "dingtalk_sign",
    "feishu_sign",
]
