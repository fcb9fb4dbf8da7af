"""Real servers for the alert sink tests, all on 127.0.0.1.

* :func:`start_pushgateway`, :func:`start_alertmanager`: the Debian ``prometheus-pushgateway``
  and ``prometheus-alertmanager`` binaries (installed by ``scripts/test.sh``) on a free port,
  with their storage in a temporary folder; stopped by PID.
* :class:`WebhookServer`: ``http.server`` in a thread that records every request and answers
  as the real services do, checking DingTalk's and Feishu's signatures the way they document.
* :class:`SmtpServer`: ``aiosmtpd`` in a thread, plain, STARTTLS or implicit TLS, with AUTH.
"""

from __future__ import annotations

import base64
import contextlib
import email
import email.policy
import hashlib
import hmac
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PUSHGATEWAY = "prometheus-pushgateway"
ALERTMANAGER = "prometheus-alertmanager"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> bytes:
    """GET ``url`` without any proxy."""
    with _NO_PROXY.open(url, timeout=timeout) as response:
        data: bytes = response.read()
        return data


def get_json(url: str) -> Any:
    """GET ``url`` without any proxy and parse the JSON answer."""
    return json.loads(http_get(url))


def wait_until(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``check`` every 50 ms until it is true; AssertionError after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# --- Prometheus daemons ---------------------------------------------------------------------


def missing_binary(name: str) -> str | None:
    """Why a test needing ``name`` must skip, or None when it is installed."""
    if shutil.which(name) is None:
        return (
            f"{name} is not installed (scripts/test.sh installs it with apt-get when run as "
            f"root or with sudo: apt-get install {name})"
        )
    return None


def binary_version(name: str) -> str:
    """First line of ``name --version`` (e.g. ``pushgateway, version 1.5.1 ...``)."""
    out = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).splitlines()[0]


@dataclass
class Daemon:
    """A server process we started; :meth:`stop` ends it by its PID."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _start(args: list[str], url: str, log: Path) -> Daemon:
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    daemon = Daemon(process, url, log)
    try:
        end = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {process.returncode}: {log.read_text()}")
            try:
                if http_get(url + "/-/ready", timeout=1) is not None:
                    return daemon
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > end:
                raise RuntimeError(f"{args[0]} not ready after 30 s: {log.read_text()}")
            time.sleep(0.1)
    except BaseException:
        daemon.stop()
        raise


def start_pushgateway(folder: Path) -> Daemon:
    """A Pushgateway on a free port, persisting into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [
        PUSHGATEWAY,
        f"--web.listen-address=127.0.0.1:{port}",
        f"--persistence.file={folder / 'pushgateway.db'}",
    ]
    return _start(args, f"http://127.0.0.1:{port}", folder / "pushgateway.log")


ALERTMANAGER_CONFIG = """\
route:
  receiver: "null"
receivers:
  - name: "null"
"""


def start_alertmanager(folder: Path) -> Daemon:
    """An Alertmanager on a free port with a null receiver, storage in ``folder``, no cluster."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alertmanager.yml").write_text(ALERTMANAGER_CONFIG)
    port = free_port()
    args = [
        ALERTMANAGER,
        f"--config.file={folder / 'alertmanager.yml'}",
        f"--storage.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    return _start(args, f"http://127.0.0.1:{port}", folder / "alertmanager.log")


# --- webhooks -------------------------------------------------------------------------------


@dataclass
class Request:
    """One request the webhook server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def dingtalk_expected_sign(secret: str, timestamp: str) -> str:
    """What DingTalk computes: base64(HmacSHA256(key=secret, msg=timestamp + "\\n" + secret))."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}\n{secret}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def feishu_expected_sign(secret: str, timestamp: str) -> str:
    """What Feishu computes: base64(HmacSHA256(key=timestamp + "\\n" + secret, msg=""))."""
    mac = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


@dataclass
class WebhookServer:
    """Records requests and answers by path.

    ``/dingtalk*`` and ``/feishu*`` answer HTTP 200 with the service's JSON error codes and,
    when a secret is set, check the signature and the one-hour timestamp window as those
    services do. ``/flaky`` answers 500 to its first request, then 200. ``/reject`` answers
    400. Anything else answers 200 ``ok`` (Slack's reply).
    """

    dingtalk_secret: str | None = None
    feishu_secret: str | None = None
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def on(self, path: str) -> list[Request]:
        """Requests received on ``path`` (without the query)."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def answer(self, request: Request) -> tuple[int, bytes]:
        if request.path == "/flaky":
            return (500, b"try again") if len(self.on("/flaky")) == 1 else (200, b"ok")
        if request.path == "/reject":
            return 400, b"invalid_payload"
        if request.path.startswith("/dingtalk"):
            return 200, json.dumps(self._dingtalk(request)).encode()
        if request.path.startswith("/feishu"):
            return 200, json.dumps(self._feishu(request)).encode()
        return 200, b"ok"

    def _dingtalk(self, request: Request) -> dict[str, Any]:
        if self.dingtalk_secret is not None:
            timestamp = request.query.get("timestamp", [""])[0]
            sign = request.query.get("sign", [""])[0]
            if not timestamp.isdigit() or abs(time.time() * 1000 - int(timestamp)) > 3_600_000:
                return {"errcode": 310000, "errmsg": "invalid timestamp"}
            if not hmac.compare_digest(
                sign, dingtalk_expected_sign(self.dingtalk_secret, timestamp)
            ):
                return {"errcode": 310000, "errmsg": "sign not match"}
        body = request.json()
        if body.get("msgtype") not in ("text", "markdown", "link", "actionCard", "feedCard"):
            return {"errcode": 40035, "errmsg": "缺少参数 json"}
        return {"errcode": 0, "errmsg": "ok"}

    def _feishu(self, request: Request) -> dict[str, Any]:
        body = request.json()
        if self.feishu_secret is not None:
            timestamp = str(body.get("timestamp", ""))
            sign = str(body.get("sign", ""))
            fresh = timestamp.isdigit() and abs(time.time() - int(timestamp)) <= 3600
            if not fresh or not hmac.compare_digest(
                sign, feishu_expected_sign(self.feishu_secret, timestamp)
            ):
                return {
                    "code": 19021,
                    "msg": "sign match fail or timestamp is not within one hour from current time",
                    "data": {},
                }
        if body.get("msg_type") != "text" or not body.get("content", {}).get("text"):
            return {"code": 9499, "msg": "Bad Request", "data": {}}
        return {
            "StatusCode": 0,
            "StatusMessage": "success",
            "code": 0,
            "msg": "success",
            "data": {},
        }

    def __enter__(self) -> WebhookServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                request = Request(
                    self.command,
                    parts.path,
                    urllib.parse.parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
                with owner._lock:
                    owner.requests.append(request)
                status, body = owner.answer(request)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_PUT = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a hung server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


# --- TLS and SMTP ---------------------------------------------------------------------------


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its key, made with the openssl CLI."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@dataclass
class Mail:
    """One message the SMTP server accepted."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    login: str | None
    tls: bool


class SmtpServer:
    """``aiosmtpd`` on 127.0.0.1 in a thread. ``security``: ``plain``, ``starttls`` (required
    before AUTH and MAIL) or ``ssl`` (implicit TLS). With ``login``/``password`` set, AUTH
    LOGIN/PLAIN is offered and those credentials are the only ones accepted."""

    def __init__(
        self,
        security: str,
        *,
        cert: tuple[Path, Path] | None = None,
        login: str | None = None,
        password: str | None = None,
    ) -> None:
        self.security = security
        self.cert = cert
        self.login = login
        self.password = password
        self.port = free_port()
        self.mails: list[Mail] = []
        self.auth_attempts: list[tuple[str, bool]] = []
        self._controller: Any = None

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = auth_data.login.decode()
        ok = login == self.login and auth_data.password.decode() == self.password
        self.auth_attempts.append((login, ok))
        return AuthResult(success=ok, handled=False, auth_data=login if ok else None)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.mails.append(
            Mail(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                message,
                session.auth_data if session.authenticated else None,
                server.transport.get_extra_info("ssl_object") is not None,
            )
        )
        return "250 OK"

    def __enter__(self) -> SmtpServer:
        from aiosmtpd.controller import Controller

        options: dict[str, Any] = {}
        if self.login is not None:
            options.update(authenticator=self._authenticate, auth_require_tls=False)
        if self.security != "plain":
            assert self.cert is not None
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.cert)
            if self.security == "starttls":
                options.update(tls_context=context, require_starttls=True, auth_require_tls=True)
            else:
                options.update(ssl_context=context)
        self._controller = Controller(
            self, hostname="127.0.0.1", port=self.port, ready_timeout=10, **options
        )
        self._controller.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._controller.stop()
