"""``trainmon report RUN [RUN ...] --serve``: the report page on a local port, kept current.

The server is the standard library's :class:`~http.server.ThreadingHTTPServer`, bound to
127.0.0.1 unless another address is asked for (``--host``), on a free port unless one is named
(``--port``). It serves:

* ``GET /`` — the page ``trainmon report`` writes, for the runs as they are now, plus
  ``assets/live.js``, which polls ``data.json`` every ~2 s (``/?poll=0.5`` for half a second)
  and draws the new points without a reload, keeping the zoom a person chose;
* ``GET /data.json?since=V`` — what changed since version ``V`` (see
  :meth:`~trainmon.report.live.LiveRuns.updates`); ``&full=1`` asks for every chart's data;
* ``GET /summary.json`` — what ``trainmon summary RUN --json`` prints at that moment (a list
  when several runs are served), from the same code.

Each request first reads what the runs appended since the last one (incrementally, see
:mod:`trainmon.report.live`), under one lock. While bound to a loopback address, a request
naming another host (``Host:`` header) is refused, so a web page elsewhere cannot read the
runs through a DNS name pointed at 127.0.0.1. Ctrl-C closes the server; the command ends 0.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import orjson

from trainmon.report.html import live_script, render_report
from trainmon.report.live import LiveRuns
from trainmon.report.model import Run, RunError
from trainmon.version import __version__

#: Seconds between the page's looks at the server (``?poll=`` in the page's address overrides).
POLL_S = 2.0
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class LiveServer(ThreadingHTTPServer):
    """An HTTP server of one :class:`LiveRuns`; requests are answered one at a time under
    :attr:`lock` (reading the runs on, then rendering what was asked for)."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        host: str,
        port: int,
        runs: LiveRuns,
        *,
        summary_json: Callable[[Sequence[Run]], bytes],
        title: str | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)
        self.runs = runs
        self.summary_json = summary_json
        self.title = title
        self.poll_s = poll_s
        self.lock = threading.Lock()
        self.host = host
        self.loopback = host in _LOOPBACK or host.startswith("127.")
        self._page: tuple[int, bytes] | None = None

    @property
    def url(self) -> str:
        """The page's address (``http://127.0.0.1:8765/``)."""
        port = self.server_address[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}/"

    def allows(self, host_header: str | None) -> bool:
        """Whether a request's ``Host`` may be answered (any, unless bound to loopback)."""
        if not self.loopback or not host_header:
            return True
        name = host_header.strip().lower()
        if name.startswith("["):
            name = name[1 : name.find("]")]
        elif name.count(":") == 1:
            name = name.partition(":")[0]
        return name in _LOOPBACK or name == self.host.lower() or name.startswith("127.")

    # -- what the routes answer (under the lock) --------------------------------------------

    def page(self) -> bytes:
        """The report page with the live script (rendered once per version)."""
        runs = self.runs
        runs.refresh()
        if self._page is None or self._page[0] != runs.version:
            config = {"version": runs.version, "poll": self.poll_s, "buckets": runs.buckets}
            text = render_report(runs.runs, runs.buckets, self.title, live=live_script(config))
            self._page = (runs.version, text.encode("utf-8"))
        return self._page[1]

    def data(self, since: int, full: bool) -> bytes:
        """``data.json``: what changed since version ``since``."""
        self.runs.refresh()
        return orjson.dumps(self.runs.updates(since, full), option=orjson.OPT_SERIALIZE_NUMPY)

    def summary(self) -> bytes:
        """``summary.json``: ``trainmon summary --json`` of the runs now."""
        self.runs.refresh()
        return self.summary_json(self.runs.runs)


class _Handler(BaseHTTPRequestHandler):
    server: LiveServer
    server_version = f"trainmon/{__version__}"

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if not self.server.allows(self.headers.get("Host")):
            self._send(403, b"this server answers requests for 127.0.0.1 only\n", "text/plain")
            return
        query = parse_qs(parts.query)
        try:
            with self.server.lock:
                if parts.path in ("/", "/index.html"):
                    self._send(200, self.server.page(), "text/html; charset=utf-8")
                elif parts.path == "/data.json":
                    since = _integer(query.get("since", ["0"])[-1])
                    if since is None:
                        self._send(400, b"since: expected a version number\n", "text/plain")
                        return
                    full = query.get("full", ["0"])[-1] not in ("", "0")
                    self._send(200, self.server.data(since, full), "application/json")
                elif parts.path == "/summary.json":
                    self._send(200, self.server.summary(), "application/json")
                else:
                    self._send(404, b"not found: try / or /summary.json\n", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away
        except Exception as exc:  # a run unreadable for now: say so, go on
            message = f"{type(exc).__name__}: {exc}"
            print(f"trainmon report: {self.path}: {message}", file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):
                self._send(500, (message + "\n").encode(), "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a poll every 2 s would fill the terminal."""


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def serve(
    runs: LiveRuns,
    *,
    summary_json: Callable[[Sequence[Run]], bytes],
    host: str = "127.0.0.1",
    port: int = 0,
    title: str | None = None,
    poll_s: float = POLL_S,
    out: IO[str] | None = None,
) -> int:
    """Serve ``runs`` until Ctrl-C (then close the server and return 0)."""
    out = out or sys.stdout
    try:
        server = LiveServer(host, port, runs, summary_json=summary_json, title=title, poll_s=poll_s)
    except OSError as exc:
        raise RunError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from exc
    try:
        print(f"serving {server.url} (Ctrl-C to stop)", file=out, flush=True)
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("stopped", file=out, flush=True)
    finally:
        server.server_close()
    return 0
