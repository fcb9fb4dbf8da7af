"""Sinks for the Prometheus ecosystem: a Pushgateway gauge per rule, and Alertmanager."""

from __future__ import annotations

import base64
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from trainmon import redact
from trainmon.alerts.delivery import AlertSink
from trainmon.alerts.formatting import (
    alert_text,
    alert_time,
    iso_time,
    json_bytes,
)
from trainmon.alerts.sinks.transport import http_send
from trainmon.core.alert import Alert

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
        http_send(
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
            starts = alert_time(alert)
        body: dict[str, Any] = {
            "labels": labels,
            "annotations": {"summary": alert.message, "description": alert_text(alert)},
            "startsAt": iso_time(starts),
        }
        if alert.state == "firing":
            self._firing[key] = (labels, starts)
        else:
            self._firing.pop(key, None)
            body["endsAt"] = iso_time(max(time.time(), starts))
        return [body]

    def deliver(self, alert: Alert) -> None:
        http_send(
            self.post_url, json_bytes(self.payload(alert)), headers={}, timeout_s=self.timeout_s
        )
