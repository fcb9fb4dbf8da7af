"""Alert sinks: where alerts go (console, file, webhooks, e-mail, Prometheus), built from config.

One module per family of sinks, :mod:`~trainmon.alerts.formatting` for how an alert reads,
:mod:`.transport` for HTTP and :mod:`.settings` for the ``alerts.sinks`` checks.

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
