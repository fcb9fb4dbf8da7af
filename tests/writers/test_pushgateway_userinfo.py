"""The Prometheus writer's ``pushgateway_url`` with ``user:password@``: pushes and the delete at
close reach the host alone with a Basic ``Authorization`` header (percent-decoded), the Host
header carries no user info, and the password is never printed."""

from __future__ import annotations

import base64
import http.server
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from conftest import free_port
from trainmon.writers.prometheus import PrometheusWriter

needs_client = pytest.mark.skipif(
    not trainmon.extras.is_installed("prometheus_client"),
    reason='needs pip install "trainmon[prometheus]"',
)


@dataclass
class Received:
    """One request the recording Pushgateway stand-in received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """``http.server`` on 127.0.0.1 in a thread: answers 200 to PUT, POST and DELETE (as a
    Pushgateway does) and keeps each request."""

    requests: list[Received] = field(default_factory=list)
    port: int = 0


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    found = Recorder()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            found.requests.append(Received(self.command, self.path, headers, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_DELETE = do_PUT

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.port = int(server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy configured on the machine."""
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def _config(base: Path, gateway: str, **prometheus: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "prometheus": {
            "enabled": True,
            "serve": False,
            "job": "auth-job",
            "pushgateway_url": gateway,
            "push_interval_s": 0,
            **prometheus,
        },
    }


def _writer(monitor: trainmon.Monitor) -> PrometheusWriter:
    (writer,) = [w for w in monitor.writers if isinstance(w, PrometheusWriter)]
    return writer


def _basic(userinfo: bytes) -> str:
    return "Basic " + base64.b64encode(userinfo).decode()


@needs_client
@pytest.mark.parametrize(
    ("userinfo", "decoded"),
    [("alice:s3cret", b"alice:s3cret"), ("al%40ice:p%3Ass%2Fw0rd", b"al@ice:p:ss/w0rd")],
)
def test_push_and_delete_send_the_userinfo_as_basic_auth_to_the_host_alone(
    tmp_path: Path, recorder: Recorder, userinfo: str, decoded: bytes
) -> None:
    """http://alice:s3cret@127.0.0.1:PORT: the PUT push and the DELETE at close both carry
    Basic alice:s3cret (percent-decoded) and Host 127.0.0.1:PORT, and none fails."""
    gateway = f"http://{userinfo}@127.0.0.1:{recorder.port}"
    monitor = trainmon.Monitor(_config(tmp_path, gateway, delete_on_close=True))
    writer = _writer(monitor)
    monitor.log({"train/loss": 1.5}, step=0)
    assert monitor.flush(timeout=30)
    monitor.close()
    assert writer.push_errors == 0
    assert [r.method for r in recorder.requests][-1] == "DELETE"
    assert {r.method for r in recorder.requests} == {"PUT", "DELETE"}
    for request in recorder.requests:
        assert request.path == "/metrics/job/auth-job/rank/0"
        assert request.headers["authorization"] == _basic(decoded)
        assert request.headers["host"] == f"127.0.0.1:{recorder.port}"
    assert b"trainmon_train_loss" in recorder.requests[0].body


@needs_client
def test_a_pushgateway_url_without_userinfo_sends_no_authorization(
    tmp_path: Path, recorder: Recorder
) -> None:
    """A plain URL pushes as before, with no Authorization header."""
    with trainmon.Monitor(_config(tmp_path, f"http://127.0.0.1:{recorder.port}")) as monitor:
        monitor.log({"train/loss": 1.5}, step=0)
        assert monitor.flush(timeout=30)
    assert recorder.requests and "authorization" not in recorder.requests[0].headers


@needs_client
def test_an_unreachable_pushgateway_with_userinfo_never_prints_the_password(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """The one warning names the host and the refused connection, never alice or s3cret."""
    port = free_port()
    monitor = trainmon.Monitor(_config(tmp_path, f"http://alice:s3cret@127.0.0.1:{port}"))
    writer = _writer(monitor)
    monitor.log({"train/loss": 1.5}, step=0)
    assert monitor.flush(timeout=30)
    monitor.close()
    assert writer.push_errors >= 1
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert f"Pushgateway at http://127.0.0.1:{port}" in warnings[0]
    assert "refused" in warnings[0]  # 127.0.0.1 was tried, not a host "alice:s3cret@..."
    assert "s3cret" not in warnings[0] and "alice" not in warnings[0]
    assert "s3cret" not in writer.location and "s3cret" not in repr(writer)
