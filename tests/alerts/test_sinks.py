"""Alert sinks against real servers on 127.0.0.1: webhooks (generic, Slack, DingTalk, Feishu),
SMTP (plain, STARTTLS, SSL), Prometheus Pushgateway and Alertmanager; delivery off the
caller's thread with retries; config errors at start-up."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alert_helpers import log_text, make_alert, no_proxy  # noqa: F401 (an autouse fixture)
from servers import (
    ALERTMANAGER,
    PUSHGATEWAY,
    Daemon,
    SmtpServer,
    WebhookServer,
    binary_version,
    free_port,
    get_json,
    missing_binary,
    self_signed_cert,
    silent_listener,
    start_alertmanager,
    start_pushgateway,
    wait_until,
)

from trainmon import ConfigError
from trainmon.alerts.delivery import AlertDispatcher
from trainmon.alerts.sinks import build_dispatcher, build_sinks

FAST: dict[str, Any] = {"backoff_s": 0.05, "max_backoff_s": 0.1}
PASSWORD = "pa55-Very-Secret-9f3c"
DING_SECRET = "SECd1ngtalk-signing-secret-0123456789abcdef"
FEISHU_SECRET = "feishu-signing-secret-ABCDEFGH"


def dispatcher(sinks: list[dict[str, Any]], tmp_path: Path | None = None) -> AlertDispatcher:
    """A dispatcher over ``sinks`` with short back-off, so retry tests stay quick."""
    return AlertDispatcher(build_sinks(sinks, run_dir=tmp_path, job="llm-run", rank=0), **FAST)


@pytest.fixture
def webhooks() -> Iterator[WebhookServer]:
    with WebhookServer(dingtalk_secret=DING_SECRET, feishu_secret=FEISHU_SECRET) as server:
        yield server


# --- console and file -----------------------------------------------------------------------


def test_console_and_file_sinks_record_each_alert(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """The console sink logs one line per alert and the file sink appends Alert.as_dict() as
    standard JSON (NaN as a string) to <run_dir>/alerts.jsonl."""
    alerts = [make_alert(value=math.nan), make_alert(state="resolved", message="back to normal")]
    with build_dispatcher(
        [{"type": "console"}, {"type": "file"}], run_dir=tmp_path, job="llm-run"
    ) as d:
        for alert in alerts:
            d.submit(alert)
        assert d.flush(5)
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    parsed = [json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}")) for line in lines]
    assert parsed[0] == {**alerts[0].as_dict(), "value": "NaN"}
    assert parsed[1] == alerts[1].as_dict()
    messages = [r.getMessage() for r in trainmon_logs if r.name == "trainmon.alerts"]
    assert messages == [
        f"ALERT [FIRING] grad-explosion (critical): {alerts[0].message}",
        "ALERT [RESOLVED] grad-explosion (critical): back to normal",
    ]
    assert [r.levelno for r in trainmon_logs if r.name == "trainmon.alerts"] == [40, 20]


def test_file_sink_path_is_relative_to_the_run_folder(tmp_path: Path) -> None:
    """A relative ``path`` lands inside run_dir, and a folder path gets alerts.jsonl inside."""
    (tmp_path / "d").mkdir()
    with build_dispatcher(
        [{"type": "file", "path": "sub/my.jsonl"}, {"type": "file", "path": str(tmp_path / "d")}],
        run_dir=tmp_path / "run",
        job="j",
    ) as d:
        d.submit(make_alert())
    assert len((tmp_path / "run" / "sub" / "my.jsonl").read_text().splitlines()) == 1
    assert len((tmp_path / "d" / "alerts.jsonl").read_text().splitlines()) == 1


# --- webhooks -------------------------------------------------------------------------------


def test_generic_json_webhook_posts_the_alert_as_dict(webhooks: WebhookServer) -> None:
    """format json POSTs Alert.as_dict() with the configured extra headers."""
    alert = make_alert()
    url = webhooks.url + "/hook?x=1"
    with dispatcher([{"type": "webhook", "url": url, "headers": {"X-Token": "tok-123"}}]) as d:
        d.submit(alert)
        assert d.flush(5)
    (request,) = webhooks.on("/hook")
    assert request.json() == alert.as_dict()
    assert request.query == {"x": ["1"]}
    assert request.headers["x-token"] == "tok-123"
    assert request.headers["content-type"].startswith("application/json")


def test_slack_webhook_posts_text_and_blocks(webhooks: WebhookServer) -> None:
    """format slack POSTs Slack's incoming-webhook body: text (fallback) plus mrkdwn blocks."""
    with dispatcher([{"type": "webhook", "url": webhooks.url + "/slack", "format": "slack"}]) as d:
        d.submit(make_alert())
        assert d.flush(5)
    body = webhooks.on("/slack")[0].json()
    assert body["text"].startswith("trainmon [FIRING] grad-explosion (critical): train/grad_norm")
    assert [b["type"] for b in body["blocks"]] == ["section", "section"]
    assert "*metric*: train/grad_norm" in body["blocks"][1]["text"]["text"]
    assert d.failures == {"webhook[0]": 0}


@pytest.mark.parametrize("msgtype", ["markdown", "text"])
def test_dingtalk_signed_robot_passes_the_servers_signature_check(
    webhooks: WebhookServer, monkeypatch: pytest.MonkeyPatch, msgtype: str
) -> None:
    """DingTalk's signed mode: timestamp (ms) and URL-encoded sign in the query verify
    server-side, and the body is a markdown or text robot message."""
    monkeypatch.setenv("DING_SECRET", DING_SECRET)
    url = webhooks.url + "/dingtalk?access_token=abc123"
    sink = {"type": "webhook", "url": url, "format": "dingtalk", "secret_env": "DING_SECRET"}
    with dispatcher([{**sink, "msgtype": msgtype}]) as d:
        d.submit(make_alert())
        assert d.flush(5)
    assert d.failures == {"webhook[0]": 0}
    (request,) = webhooks.on("/dingtalk")
    assert request.query["access_token"] == ["abc123"]
    assert abs(int(request.query["timestamp"][0]) - time.time() * 1000) < 60_000
    body = request.json()
    assert body["msgtype"] == msgtype
    if msgtype == "markdown":
        assert body["markdown"]["title"] == "trainmon [FIRING] grad-explosion (critical)"
        assert "> train/grad_norm = 1e+06" in body["markdown"]["text"]
    else:
        assert body["text"]["content"].startswith("trainmon [FIRING] grad-explosion")


def test_dingtalk_wrong_secret_is_refused_once_and_not_retried(
    webhooks: WebhookServer,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """DingTalk answers a bad signature with HTTP 200 and errcode 310000: that is a failure,
    counted, reported once without the secret, and not retried."""
    monkeypatch.setenv("DING_SECRET", "SECwrong-secret-value")
    url = webhooks.url + "/dingtalk?access_token=abc123"
    sink = {"type": "webhook", "url": url, "format": "dingtalk", "secret_env": "DING_SECRET"}
    with dispatcher([sink]) as d:
        d.submit(make_alert("a"))
        d.submit(make_alert("b"))
        assert d.flush(5)
    assert d.failures == {"webhook[0]": 2}
    assert len(webhooks.on("/dingtalk")) == 2  # one attempt per alert
    warnings = [r for r in trainmon_logs if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "webhook[0]" in text and "code 310000: sign not match" in text
    assert "SECwrong-secret-value" not in log_text(trainmon_logs)
    assert "abc123" not in log_text(trainmon_logs)  # the token in the URL is not printed


def test_feishu_signed_bot_passes_the_servers_signature_check(
    webhooks: WebhookServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Feishu's signed mode: timestamp (s) and sign in the JSON body verify server-side, and
    the body is a text message."""
    monkeypatch.setenv("FEISHU_SECRET", FEISHU_SECRET)
    url = webhooks.url + "/feishu/open-apis/bot/v2/hook/0f1e2d"
    sink = {"type": "webhook", "url": url, "format": "feishu", "secret_env": "FEISHU_SECRET"}
    with dispatcher([sink]) as d:
        d.submit(make_alert(state="resolved", message="grad norm back under 1000"))
        assert d.flush(5)
    assert d.failures == {"webhook[0]": 0}
    body = webhooks.on("/feishu/open-apis/bot/v2/hook/0f1e2d")[0].json()
    assert body["msg_type"] == "text"
    assert body["content"]["text"].startswith("trainmon [RESOLVED] grad-explosion (critical)\n")
    assert "grad norm back under 1000" in body["content"]["text"]
    assert abs(int(body["timestamp"]) - time.time()) < 60


def test_feishu_unsigned_bot_gets_a_plain_text_message(webhooks: WebhookServer) -> None:
    """Without secret_env the Feishu body has no timestamp/sign (a bot without signing)."""
    webhooks.feishu_secret = None
    with dispatcher(
        [{"type": "webhook", "url": webhooks.url + "/feishu", "format": "feishu"}]
    ) as d:
        d.submit(make_alert())
        assert d.flush(5)
    body = webhooks.on("/feishu")[0].json()
    assert set(body) == {"msg_type", "content"} and d.failures == {"webhook[0]": 0}


# --- delivery: retries, a sink that is down, close -----------------------------------------


def test_a_failed_attempt_is_retried_and_delivers_in_order(
    webhooks: WebhookServer, trainmon_logs: list[logging.LogRecord]
) -> None:
    """A 500 is retried after a back-off; firing then resolved arrive in that order, with no
    warning and no failure counted."""
    with dispatcher([{"type": "webhook", "url": webhooks.url + "/flaky"}]) as d:
        d.submit(make_alert())
        d.submit(make_alert(state="resolved"))
        assert d.flush(5)
    states = [r.json()["state"] for r in webhooks.on("/flaky")]
    assert states == ["firing", "firing", "resolved"]  # first attempt got the 500
    assert d.failures == {"webhook[0]": 0}
    assert not [r for r in trainmon_logs if r.levelno >= logging.WARNING]


def test_a_rejected_request_is_not_retried(webhooks: WebhookServer) -> None:
    """A 4xx cannot succeed by trying again: one attempt, counted as a failure."""
    with dispatcher([{"type": "webhook", "url": webhooks.url + "/reject"}]) as d:
        d.submit(make_alert())
        assert d.flush(5)
    assert len(webhooks.on("/reject")) == 1 and d.failures == {"webhook[0]": 1}


def test_a_sink_that_is_down_never_blocks_and_is_reported_once(
    tmp_path: Path, webhooks: WebhookServer, trainmon_logs: list[logging.LogRecord]
) -> None:
    """With one webhook on a closed port: submit returns at once, each alert is tried 3 times
    then counted, one warning names the sink and its target, and the other sinks deliver."""
    dead = f"http://127.0.0.1:{free_port()}/alerts"
    d = dispatcher(
        [
            {"type": "webhook", "url": dead},
            {"type": "file"},
            {"type": "webhook", "url": webhooks.url + "/ok"},
        ],
        tmp_path,
    )
    start = time.perf_counter()
    for i in range(5):
        d.submit(make_alert(f"rule-{i}"))
    assert time.perf_counter() - start < 0.25  # no network I/O on the calling thread
    assert d.flush(10)
    d.close()
    assert d.failures == {"webhook[0]": 5, "file[1]": 0, "webhook[2]": 0}
    assert len((tmp_path / "alerts.jsonl").read_text().splitlines()) == 5
    assert len(webhooks.on("/ok")) == 5
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "webhook[0] (webhook json http://127.0.0.1:" in warnings[0]
    assert "after 3 attempt(s)" in warnings[0] and "cannot connect" in warnings[0]


def test_close_is_bounded_with_a_hung_sink_and_submit_after_close_is_ignored(
    webhooks: WebhookServer,
) -> None:
    """A server that accepts but never answers cannot hold close() past its timeout; close
    is idempotent and a later submit neither raises nor delivers."""
    with silent_listener() as port:
        d = dispatcher(
            [
                {"type": "webhook", "url": f"http://127.0.0.1:{port}/", "timeout_s": 30},
                {"type": "webhook", "url": webhooks.url + "/ok"},
            ]
        )
        d.submit(make_alert())
        wait_until(lambda: len(webhooks.on("/ok")) == 1, 5, "the healthy sink")
        assert not d.flush(0.2)  # the hung sink still holds its alert
        start = time.monotonic()
        d.close(timeout=0.5)
        d.close(timeout=0.5)
        assert time.monotonic() - start < 3
        d.submit(make_alert("after-close"))
    # the listener is gone: the hung attempt fails and, past the deadline, is given up
    wait_until(lambda: d.pending == 0, 10, "the hung sink to give up")
    assert d.failures == {"webhook[0]": 1, "webhook[1]": 0}
    assert len(webhooks.on("/ok")) == 1


# --- e-mail ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip(
            "the openssl command is needed to make a test certificate (apt-get install openssl)"
        )
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def email_sink(server: SmtpServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "email",
        "host": "127.0.0.1",
        "port": server.port,
        "security": server.security,
        "sender": "trainmon@example.org",
        "to": ["oncall@example.org", "ml@example.org"],
        "timeout_s": 5,
        **extra,
    }


def test_email_over_plain_smtp_reaches_every_recipient() -> None:
    """security plain sends one message per alert: subject with state, rule and job; body
    with the message and facts; envelope to every recipient."""
    with SmtpServer("plain") as server, dispatcher([email_sink(server)]) as d:
        d.submit(make_alert())
        assert d.flush(10)
    (mail,) = server.mails
    assert mail.mail_from == "trainmon@example.org"
    assert mail.rcpt_tos == ["oncall@example.org", "ml@example.org"]
    assert mail.message["Subject"] == "trainmon [FIRING] grad-explosion (critical) - llm-run rank 0"
    body = mail.message.get_content()
    assert "train/grad_norm = 1e+06 > 1000 at step 120" in body and "step: 120" in body
    assert not mail.tls and mail.login is None


@pytest.mark.parametrize("security", ["starttls", "ssl"])
def test_email_over_tls_logs_in_with_credentials_from_the_environment(
    security: str,
    cert: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """STARTTLS and implicit TLS verify the server against ca_file, AUTH with the env
    credentials succeeds, and the password appears in no log, stream or alerts.jsonl."""
    monkeypatch.setenv("SMTP_USER", "alerts-bot")
    monkeypatch.setenv("SMTP_PASSWORD", PASSWORD)
    creds = {"username_env": "SMTP_USER", "password_env": "SMTP_PASSWORD"}
    with SmtpServer(security, cert=cert, login="alerts-bot", password=PASSWORD) as server:
        sinks = [email_sink(server, ca_file=str(cert[0]), **creds), {"type": "file"}]
        sinks.append({"type": "console"})
        with dispatcher(sinks, tmp_path) as d:
            d.submit(make_alert())
            d.submit(make_alert(state="resolved", message="grad norm back to 3.2"))
            assert d.flush(10)
    assert d.failures == {"email[0]": 0, "file[1]": 0, "console[2]": 0}
    assert [m.message["Subject"].split(" (")[0] for m in server.mails] == [
        "trainmon [FIRING] grad-explosion",
        "trainmon [RESOLVED] grad-explosion",
    ]
    assert all(m.tls and m.login == "alerts-bot" for m in server.mails)
    assert server.auth_attempts == [("alerts-bot", True)] * 2
    out, err = capfd.readouterr()
    written = (tmp_path / "alerts.jsonl").read_text()
    for text in (out, err, written, log_text(trainmon_logs)):
        assert PASSWORD not in text


def test_email_with_a_wrong_password_fails_without_printing_it(
    cert: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A refused login is one warning naming the e-mail sink and server, counted, not
    retried, and neither the password nor the login leaks into any output."""
    monkeypatch.setenv("SMTP_USER", "alerts-bot")
    monkeypatch.setenv("SMTP_PASSWORD", PASSWORD)
    creds = {"username_env": "SMTP_USER", "password_env": "SMTP_PASSWORD"}
    with SmtpServer("starttls", cert=cert, login="alerts-bot", password="other") as server:
        sinks = [email_sink(server, ca_file=str(cert[0]), **creds), {"type": "file"}]
        with dispatcher(sinks, tmp_path) as d:
            d.submit(make_alert())
            assert d.flush(10)
    assert d.failures == {"email[0]": 1, "file[1]": 0} and server.mails == []
    assert server.auth_attempts and all(a == ("alerts-bot", False) for a in server.auth_attempts)
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"email[0] (email smtp starttls 127.0.0.1:{server.port}" in warnings[0]
    assert "SMTP login refused (code 535)" in warnings[0]
    out, err = capfd.readouterr()
    written = (tmp_path / "alerts.jsonl").read_text()
    for text in (out, err, written, log_text(trainmon_logs)):
        assert PASSWORD not in text and "alerts-bot" not in text


def test_email_refuses_an_untrusted_certificate_unless_told_not_to_verify(
    cert: tuple[Path, Path],
) -> None:
    """tls_verify (default true) refuses a self-signed server without ca_file;
    tls_verify false accepts it."""
    with SmtpServer("ssl", cert=cert) as server:
        with dispatcher([email_sink(server)]) as strict:
            strict.submit(make_alert())
            assert strict.flush(10)
        with dispatcher([email_sink(server, tls_verify=False)]) as lax:
            lax.submit(make_alert())
            assert lax.flush(10)
    assert strict.failures == {"email[0]": 1} and lax.failures == {"email[0]": 0}
    assert len(server.mails) == 1


# --- Prometheus Pushgateway and Alertmanager -------------------------------------------------


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    reason = missing_binary(PUSHGATEWAY)
    if reason:
        pytest.skip(reason)
    daemon = start_pushgateway(tmp_path_factory.mktemp("pushgateway"))
    print(binary_version(PUSHGATEWAY))
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    reason = missing_binary(ALERTMANAGER)
    if reason:
        pytest.skip(reason)
    daemon = start_alertmanager(tmp_path_factory.mktemp("alertmanager"))
    print(binary_version(ALERTMANAGER))
    yield daemon
    daemon.stop()


def pushed_alert_gauges(pushgateway: Daemon, job: str) -> dict[tuple[str, str, str], str]:
    """(rule, severity, rank) -> value of trainmon_alert in the Pushgateway's groups of ``job``,
    read back through its /api/v1/metrics API."""
    found = {}
    for group in get_json(pushgateway.url + "/api/v1/metrics")["data"]:
        if group["labels"].get("job") != job or "trainmon_alert" not in group:
            continue
        assert group["trainmon_alert"]["type"] == "GAUGE"
        for metric in group["trainmon_alert"]["metrics"]:
            labels = metric["labels"]
            assert labels["job"] == job
            found[(labels["rule"], labels["severity"], labels["rank"])] = metric["value"]
    return found


@pytest.mark.slow
def test_pushgateway_gauge_is_1_while_firing_and_0_once_resolved(pushgateway: Daemon) -> None:
    """trainmon_alert{rule, job, severity} reads 1 after firing and 0 after resolving, per
    rule, in the group job + rank (a job with '/' is base64-encoded in the URL)."""
    job = "team/llm-run"
    d = AlertDispatcher(
        build_sinks(
            [{"type": "pushgateway", "url": pushgateway.url}], run_dir=None, job=job, rank=3
        ),
        **FAST,
    )
    with d:
        d.submit(make_alert("loss-nan", severity="critical"))
        d.submit(make_alert("slow-step", severity="warning"))
        assert d.flush(10)
        assert pushed_alert_gauges(pushgateway, job) == {
            ("loss-nan", "critical", "3"): "1",
            ("slow-step", "warning", "3"): "1",
        }
        d.submit(make_alert("loss-nan", state="resolved", severity="critical"))
        assert d.flush(10)
        assert pushed_alert_gauges(pushgateway, job) == {
            ("loss-nan", "critical", "3"): "0",
            ("slow-step", "warning", "3"): "1",
        }
    assert d.failures == {"pushgateway[0]": 0}


@pytest.mark.slow
def test_pushgateway_sink_job_overrides_the_run_job(pushgateway: Daemon) -> None:
    """The sink's own ``job`` key is the grouping job."""
    sinks = [{"type": "pushgateway", "url": pushgateway.url + "/", "job": "alerts-only"}]
    with build_dispatcher(sinks, run_dir=None, job="ignored") as d:
        d.submit(make_alert())
        assert d.flush(10)
    assert pushed_alert_gauges(pushgateway, "alerts-only") == {
        ("grad-explosion", "critical", "0"): "1"
    }


@pytest.mark.slow
def test_alertmanager_shows_the_alert_active_then_resolves_it(alertmanager: Daemon) -> None:
    """A firing alert is active in Alertmanager with alertname/job/severity labels and the
    message as summary; the resolved one (same labels, endsAt = now) leaves the active list."""

    def ours() -> list[dict[str, Any]]:
        alerts = get_json(alertmanager.url + "/api/v2/alerts")
        return [a for a in alerts if a["labels"]["alertname"] == "grad-explosion"]

    with build_dispatcher(
        [{"type": "alertmanager", "url": alertmanager.url}], run_dir=None, job="llm-run"
    ) as d:
        firing = make_alert()
        d.submit(firing)
        assert d.flush(10)
        wait_until(lambda: ours()[0]["status"]["state"] == "active", 10, "an active alert")
        (alert,) = ours()
        assert alert["labels"] == {
            "alertname": "grad-explosion",
            "job": "llm-run",
            "rank": "0",
            "severity": "critical",
            "team": "ml",
        }
        assert alert["annotations"]["summary"] == firing.message
        d.submit(make_alert(state="resolved", message="grad norm back to 3.2"))
        assert d.flush(10)
        wait_until(lambda: ours() == [], 10, "the alert to resolve")
        resolved = get_json(alertmanager.url + "/api/v2/alerts?active=false&silenced=false")
        assert [a for a in resolved if a["labels"]["alertname"] == "grad-explosion"] == []
    assert d.failures == {"alertmanager[0]": 0}


# --- config errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sinks", "message"),
    [
        ({"type": "console"}, r"'alerts.sinks' = .*expected a list of sink settings"),
        (["console"], r"'alerts.sinks\[0\]' = 'console': expected a mapping with a 'type'"),
        ([{}], r"'alerts.sinks\[0\].type' is missing: expected one of console, file, webhook"),
        (
            [{"type": "console"}, {"type": "webhok", "url": "http://x"}],
            r"'alerts.sinks\[1\].type' = 'webhok': unknown sink type; did you mean 'webhook'\?",
        ),
        ([{"type": "webhook"}], r"'alerts.sinks\[0\].url' is missing: a webhook sink needs it"),
        (
            [{"type": "webhook", "url": "hooks.slack.com/x"}],
            r"'alerts.sinks\[0\].url' = 'hooks.slack.com/x': expected an http:// or https:// URL",
        ),
        (
            [{"type": "webhook", "url": "http://h", "fromat": "slack"}],
            r"unknown key 'alerts.sinks\[0\].fromat'; did you mean 'format'\? valid keys of a "
            r"webhook sink: type, url, format",
        ),
        (
            [{"type": "webhook", "url": "http://h", "format": "slak"}],
            r"'alerts.sinks\[0\].format' = 'slak': expected one of 'json', 'slack', 'dingtalk', "
            r"'feishu'; did you mean 'slack'\?",
        ),
        (
            [{"type": "webhook", "url": "http://h", "timeout_s": 0}],
            r"'alerts.sinks\[0\].timeout_s' = 0: expected a finite number of seconds > 0",
        ),
        (
            [{"type": "webhook", "url": "http://h", "secret_env": "TRAINMON_TEST_UNSET"}],
            r"'alerts.sinks\[0\].secret_env' = 'TRAINMON_TEST_UNSET': the environment variable "
            r"TRAINMON_TEST_UNSET is not set",
        ),
        (
            [{"type": "webhook", "url": "http://h", "secret_env": "HOME"}],
            r"'alerts.sinks\[0\].secret_env' = 'HOME': expected no secret: only the dingtalk",
        ),
        (
            [{"type": "email", "host": "h", "port": 70000, "sender": "a@b", "to": ["c@d"]}],
            r"'alerts.sinks\[0\].port' = 70000: expected an integer from 1 to 65535",
        ),
        (
            [{"type": "email", "host": "h", "port": "25", "sender": "a@b", "to": ["c@d"]}],
            r"'alerts.sinks\[0\].port' = '25': expected an integer from 1 to 65535 or null",
        ),
        (
            [{"type": "email", "host": "h", "sender": "a@b", "to": "c@d"}],
            r"'alerts.sinks\[0\].to' = 'c@d': expected a non-empty list of strings",
        ),
        (
            [{"type": "email", "host": "h", "sender": "a@b"}],
            r"'alerts.sinks\[0\].to' is missing: an email sink needs it",
        ),
        (
            [{"type": "email", "host": "h", "sender": "a@b", "to": ["c"], "security": "tls"}],
            r"'alerts.sinks\[0\].security' = 'tls': expected one of 'plain', 'starttls', 'ssl'",
        ),
        (
            [{"type": "email", "host": "h", "sender": "a@b", "to": ["c"], "username_env": "HOME"}],
            r"'alerts.sinks\[0\].password_env' is missing",
        ),
        (
            [{"type": "email", "host": "h", "sender": "a@b", "to": ["c"], "password": "x"}],
            r"unknown key 'alerts.sinks\[0\].password'; did you mean 'password_env'\?",
        ),
        (
            [{"type": "pushgateway", "url": "http://h:99999"}],
            r"'alerts.sinks\[0\].url' = 'http://h:99999': expected a URL whose port is an integer",
        ),
        ([{"type": "alertmanager"}], r"'alerts.sinks\[0\].url' is missing"),
        ([{"type": "file"}], r"'alerts.sinks\[0\].path' is missing and there is no run folder"),
    ],
)
def test_bad_sink_configs_fail_at_build_time(sinks: Any, message: str) -> None:
    """Each mistake is a ConfigError naming alerts.sinks[i].<key>, what was expected and,
    for a typo, the closest valid name."""
    with pytest.raises(ConfigError, match=message):
        build_dispatcher(sinks, run_dir=None, job="j")


def test_sink_that_never_answers_with_a_full_queue_is_reported_once_and_counted(
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """A sink whose server accepts and never answers, once its queue is full, loses further
    alerts with one warning naming it; each lost alert is counted, and after close every alert
    it did not deliver (dropped or still held) is reported by undelivered()."""
    with silent_listener() as port:
        d = AlertDispatcher(
            build_sinks(
                [{"type": "webhook", "url": f"http://127.0.0.1:{port}/", "timeout_s": 30}],
                run_dir=None,
                job="llm-run",
                rank=0,
            ),
            max_pending=2,
            **FAST,
        )
        for i in range(6):
            d.submit(make_alert(f"rule-{i}"))
        assert d.failures == {"webhook[0]": 4}
        warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "webhook[0]" in warnings[0] and "not delivering" in warnings[0]
        assert "rule-2" in warnings[0]
        start = time.monotonic()
        d.close(timeout=0.3)
        assert time.monotonic() - start < 1.0
        assert d.undelivered() == {"webhook[0]": 6}


def test_monitor_close_keeps_its_budget_with_a_hung_alert_sink(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """With an alert sink that never answers, Monitor.close() returns within
    trainmon.close_timeout_s and one warning says which sink did not deliver how many alerts."""
    from trainmon import Monitor

    with silent_listener() as port:
        monitor = Monitor(
            {
                "console": {"enabled": False},
                "trainmon": {"close_timeout_s": 1.0},
                "alerts": {
                    "rules": [{"name": "loss-high", "metric": "loss", "op": ">", "threshold": 1}],
                    "sinks": [
                        {"type": "webhook", "url": f"http://127.0.0.1:{port}/", "timeout_s": 30}
                    ],
                },
            }
        )
        for step in range(20):
            monitor.log({"loss": 5.0}, step=step)
        start = time.monotonic()
        monitor.close()
        took = time.monotonic() - start
    assert took < 1.5  # before: 10 s
    summary = [r.getMessage() for r in trainmon_logs if "not delivered" in r.getMessage()]
    assert len(summary) == 1, summary
    assert "alert sink webhook[0]: 1 alerts" in summary[0]
