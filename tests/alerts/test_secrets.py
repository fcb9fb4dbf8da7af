"""Secrets never printed: webhook tokens in URL paths and queries, header values, and response
bodies that echo them stay out of every warning and error message."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainmon
from trainmon import redact
from trainmon.alerts.delivery import AlertDispatcher
from trainmon.alerts.sinks import build_sinks
from trainmon.cli import main
from trainmon.core.alert import Alert

SLACK_PATH = "/services/T0SECRET1/B0SECRET2/xoxbTokenValue42"
QUERY_TOKEN = "abcdefSECRETtoken123"
HEADER_VALUE = "Bearer header-secret-777"


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers 403 with a body quoting the request path (plain and JSON-escaped)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": "invalid_token", "path": self.path}).encode()
        body += f" no such hook: {self.path}".encode()
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _alert() -> Alert:
    return Alert(
        rule="loss-high",
        kind="threshold",
        state="firing",
        message="train/loss = 12 > 10 at step 3",
        metric="train/loss",
        value=12.0,
        step=3,
        time=0.0,
        severity="warning",
    )


def _secret_free(text: str) -> None:
    for secret in ("T0SECRET1", "B0SECRET2", "xoxbTokenValue42", QUERY_TOKEN, "header-secret"):
        assert secret not in text, f"{secret!r} printed in: {text}"


@pytest.mark.parametrize("fmt", ["json", "slack"])
def test_the_give_up_warning_and_an_echoing_4xx_body_print_no_token(
    fmt: str, echo_server: str, trainmon_logs: list[logging.LogRecord]
) -> None:
    """With the default json format too: the warning names the sink as scheme://host/***,
    and the server's 403 body quoting the path is scrubbed."""
    url = f"{echo_server}{SLACK_PATH}?access_token={QUERY_TOKEN}"
    sinks = build_sinks(
        [
            {
                "type": "webhook",
                "url": url,
                "format": fmt,
                "headers": {"Authorization": HEADER_VALUE},
            }
        ],
        run_dir=None,
        job="job",
    )
    with AlertDispatcher(sinks, backoff_s=0.01) as dispatcher:
        dispatcher.submit(_alert())
        assert dispatcher.flush(5)
    assert dispatcher.failures == {"webhook[0]": 1}
    text = "\n".join(r.getMessage() for r in trainmon_logs)
    assert "HTTP 403" in text and "invalid_token" in text  # the useful part stays
    assert f"{echo_server}/***" in text
    _secret_free(text)
    _secret_free(repr(sinks[0]))


def test_config_errors_show_no_token(tmp_path: Path) -> None:
    """A ConfigError about a sink URL (or a header) masks the path, the query and the values."""
    bad_port = f"https://oapi.dingtalk.com:99999/robot/send?access_token={QUERY_TOKEN}"
    for sink in (
        {"type": "webhook", "url": bad_port},
        {"type": "webhook", "url": f"ftp://hooks.slack.com{SLACK_PATH}"},
        {"type": "webhook", "url": "http://h", "headers": {"Authorization": HEADER_VALUE, "n": 1}},
    ):
        config = {"alerts": {"rules": [], "sinks": [sink]}}
        with pytest.raises(trainmon.ConfigError) as refused:
            trainmon.Monitor(config).close()
        _secret_free(str(refused.value))
        assert "alerts.sinks[0]" in str(refused.value)
    with pytest.raises(trainmon.ConfigError) as refused:
        trainmon.Monitor({"prometheus": {"pushgateway_url": 5}}).close()
    with pytest.raises(trainmon.ConfigError) as refused:
        trainmon.Monitor(
            {"mlflow": {"tracking_uri": [f"http://u:pw@h/x?access_token={QUERY_TOKEN}"]}}
        ).close()
    _secret_free(str(refused.value))


def test_validate_prints_no_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate lists the sink as scheme://host/*** and the error path masks it too."""
    url = f"https://hooks.slack.com{SLACK_PATH}?access_token={QUERY_TOKEN}"
    path = tmp_path / "c.json"
    rule = {"name": "r", "metric": "train/loss", "op": ">", "threshold": 1}
    path.write_text(
        json.dumps({"alerts": {"rules": [rule], "sinks": [{"type": "webhook", "url": url}]}})
    )
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "https://hooks.slack.com/***" in out
    _secret_free(out)
    path.write_text(
        json.dumps(
            {
                "alerts": {
                    "rules": [rule],
                    "sinks": [{"type": "webhook", "url": url, "timeout_s": 0}],
                }
            }
        )
    )
    assert main(["validate", str(path)]) == 2
    _secret_free(capsys.readouterr().err)


def test_redact_text_masks_urls_parameters_and_escaped_forms() -> None:
    """Each form a server may echo a secret in is masked."""
    secrets = redact.url_secrets(f"https://h{SLACK_PATH}?access_token={QUERY_TOKEN}")
    for echoed in (
        SLACK_PATH,
        SLACK_PATH.replace("/", "\\/"),
        "T0SECRET1%2FB0SECRET2",
        f"token={QUERY_TOKEN}",
        f"see https://other.example{SLACK_PATH}",
    ):
        _secret_free(redact.text(echoed, secrets))
    assert redact.url("https://user:pw@h:8443/a?b=c") == "https://h:8443/***"
    assert redact.url("http://pushgateway:9091") == "http://pushgateway:9091"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://alice:pw@host:5000/api?token=abc123", "http://***@host:5000/api?token=***"),
        ("https://tok-9f8e@mlflow.example/prefix", "https://***@mlflow.example/prefix"),
        ("sqlite:////data/runs/mlflow.db", "sqlite:////data/runs/mlflow.db"),
        ("databricks", "databricks"),
    ],
)
def test_credentials_masks_user_info_and_tokens_but_keeps_a_store_path(
    uri: str, shown: str
) -> None:
    """A tracking URI names a store by its path: only user info and secret parameters go."""
    assert redact.credentials(uri) == shown
    assert redact.credentials_in(f"cannot reach {uri} now") == f"cannot reach {shown} now"
