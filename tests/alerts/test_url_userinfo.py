"""A ``user:password@`` in a webhook, Pushgateway or Alertmanager URL: the request goes to the
host alone with a Basic ``Authorization`` header (percent-decoded), the Host header carries no
user info, and the password is never printed, as with ``requests`` and ``urllib``."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from alert_helpers import log_text, make_alert, no_proxy  # noqa: F401 (an autouse fixture)
from servers import Request, WebhookServer, free_port

from trainmon.alerts.delivery import AlertDispatcher, DeliveryError
from trainmon.alerts.sinks import build_sinks

FAST: dict[str, Any] = {"backoff_s": 0.05, "max_backoff_s": 0.1}
BASIC = "Basic " + base64.b64encode(b"alice:s3cret").decode()


def with_userinfo(base: str, userinfo: str = "alice:s3cret") -> str:
    """``base`` (``http://127.0.0.1:PORT``) with ``userinfo@`` before the host."""
    return base.replace("http://", f"http://{userinfo}@", 1)


def deliver(sink: dict[str, Any]) -> AlertDispatcher:
    """One alert delivered by a dispatcher over ``sink``; returns it, closed."""
    with AlertDispatcher(build_sinks([sink], run_dir=None, job="llm-run", rank=0), **FAST) as d:
        d.submit(make_alert())
        assert d.flush(10)
    return d


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    with WebhookServer() as webhooks:
        yield webhooks


def assert_basic_auth_to_host(request: Request, server: WebhookServer, expected: str) -> None:
    host = server.url.removeprefix("http://")
    assert request.headers["authorization"] == expected
    assert request.headers["host"] == host  # 127.0.0.1:PORT, no user info


@pytest.mark.parametrize("kind", ["webhook", "alertmanager", "pushgateway"])
def test_userinfo_in_the_url_is_sent_as_basic_auth_to_the_host_alone(
    kind: str, server: WebhookServer
) -> None:
    """Each HTTP sink reaches http://alice:s3cret@127.0.0.1:PORT/... with Basic alice:s3cret
    and Host 127.0.0.1:PORT, and delivers (no failure counted)."""
    url = with_userinfo(server.url) + ("/hook" if kind == "webhook" else "")
    d = deliver({"type": kind, "url": url})
    assert d.failures == {f"{kind}[0]": 0}
    (request,) = server.requests
    assert_basic_auth_to_host(request, server, BASIC)
    expected_path = {
        "webhook": "/hook",
        "alertmanager": "/api/v2/alerts",
        "pushgateway": "/metrics/job/llm-run/rank/0",
    }[kind]
    assert request.path == expected_path


def test_percent_encoded_userinfo_is_decoded_before_it_is_sent(server: WebhookServer) -> None:
    """``al%40ice:p%3Ass%2Fw0rd@`` is sent as user ``al@ice``, password ``p:ss/w0rd``."""
    deliver({"type": "webhook", "url": with_userinfo(server.url, "al%40ice:p%3Ass%2Fw0rd")})
    (request,) = server.requests
    assert_basic_auth_to_host(
        request, server, "Basic " + base64.b64encode(b"al@ice:p:ss/w0rd").decode()
    )


def test_a_user_without_password_is_sent_with_an_empty_one(server: WebhookServer) -> None:
    """``http://alice@host/`` sends Basic ``alice:`` (what requests and curl send)."""
    deliver({"type": "alertmanager", "url": with_userinfo(server.url, "alice")})
    (request,) = server.requests
    assert_basic_auth_to_host(request, server, "Basic " + base64.b64encode(b"alice:").decode())


def test_an_authorization_header_in_the_config_wins_over_the_userinfo(
    server: WebhookServer,
) -> None:
    """A webhook's own ``headers: {"Authorization": ...}`` is sent as given, not replaced."""
    url = with_userinfo(server.url) + "/hook"
    deliver({"type": "webhook", "url": url, "headers": {"Authorization": "Bearer tok-123"}})
    (request,) = server.requests
    assert_basic_auth_to_host(request, server, "Bearer tok-123")


def test_a_url_without_userinfo_sends_no_authorization(server: WebhookServer) -> None:
    """No user info, no Authorization header: nothing changes for plain URLs."""
    deliver({"type": "webhook", "url": server.url + "/hook"})
    (request,) = server.requests
    assert "authorization" not in request.headers


@pytest.mark.parametrize("kind", ["webhook", "alertmanager", "pushgateway"])
def test_an_unreachable_url_with_userinfo_never_prints_the_password(
    kind: str, trainmon_logs: list[logging.LogRecord]
) -> None:
    """The sink's error and the dispatcher's give-up warning name the host, never s3cret."""
    url = f"http://alice:s3cret@127.0.0.1:{free_port()}/hook"
    (sink,) = build_sinks([{"type": kind, "url": url}], run_dir=None, job="llm-run", rank=0)
    with pytest.raises(DeliveryError) as caught:
        sink.deliver(make_alert())
    assert "refused" in str(caught.value)  # 127.0.0.1 was tried, not a host "alice:s3cret@..."
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(sink)
    d = deliver({"type": kind, "url": url})
    assert d.failures == {f"{kind}[0]": 1}
    warnings = log_text(trainmon_logs)
    assert "could not deliver" in warnings and "127.0.0.1" in warnings
    assert "s3cret" not in warnings and "alice" not in warnings
