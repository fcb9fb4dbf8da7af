"""The webhook sink: generic JSON, Slack, DingTalk and Feishu (signed when a secret is set)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from trainmon import redact
from trainmon.alerts.delivery import AlertSink, DeliveryError
from trainmon.alerts.formatting import (
    alert_facts,
    alert_markdown,
    alert_text,
    alert_title,
    json_bytes,
)
from trainmon.alerts.sinks.transport import env_value, http_send
from trainmon.config import WebhookFormat
from trainmon.core.alert import Alert

WEBHOOK_FORMATS: tuple[str, ...] = typing.get_args(WebhookFormat)


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
        secret = env_value(self.secret_env, "the webhook signing secret")
        if self.format == "json":
            body: dict[str, Any] = alert.as_dict()
        elif self.format == "slack":
            body = self._slack(alert)
        elif self.format == "dingtalk":
            body = self._dingtalk(alert)
            if secret is not None:
                url = _add_query(url, dingtalk_sign(secret, int(time.time() * 1000)))
        else:
            body = {"msg_type": "text", "content": {"text": alert_text(alert)}}
            if secret is not None:
                timestamp = int(time.time())
                body = {"timestamp": str(timestamp), "sign": feishu_sign(secret, timestamp), **body}
        reply = http_send(url, json_bytes(body), headers=self.headers, timeout_s=self.timeout_s)
        if self.format in ("dingtalk", "feishu"):
            _check_bot_reply(self.format, reply)

    @staticmethod
    def _slack(alert: Alert) -> dict[str, Any]:
        facts = "\n".join(f"*{name}*: {text}" for name, text in alert_facts(alert))
        return {
            "text": f"trainmon {alert_title(alert)}: {alert.message}",
            "blocks": [
                {
                    "type": "section",
                    "text": {
                        "type": "mrkdwn",
                        "text": f"*trainmon {alert_title(alert)}*\n{alert.message}",
                    },
                },
                {"type": "section", "text": {"type": "mrkdwn", "text": facts}},
            ],
        }

    def _dingtalk(self, alert: Alert) -> dict[str, Any]:
        if self.msgtype == "text":
            return {"msgtype": "text", "text": {"content": alert_text(alert)}}
        return {
            "msgtype": "markdown",
            "markdown": {"title": f"trainmon {alert_title(alert)}", "text": alert_markdown(alert)},
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
