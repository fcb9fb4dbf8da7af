"""The Prometheus writer: the latest value of every metric, scraped and/or pushed.

The training side only updates a dict under a lock; a collector reads it when Prometheus
scrapes, and pushes happen in :meth:`flush` on the background thread. Behaviour and labels are
in the docs (docs/outputs.md).
"""

from __future__ import annotations

import errno
import functools
import importlib
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainmon import extras, redact
from trainmon.config import PrometheusConfig, TrainmonConfig
from trainmon.core.events import Number, StepScalars
from trainmon.core.place import ProcessPlace, local_rank
from trainmon.core.writer import Writer
from trainmon.errors import first_line
from trainmon.logging import get_logger

_log = get_logger("prometheus")

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str, namespace: str = "trainmon") -> str:
    """The Prometheus name for a trainmon metric: ``train/loss`` -> ``trainmon_train_loss``."""
    cleaned = _INVALID.sub("_", name)
    full = f"{namespace}_{cleaned}" if namespace else cleaned
    return "_" + full if not full or full[0].isdigit() else full


def _push_target(url: str) -> tuple[str, Any]:
    """The Pushgateway URL without its ``user:password@``, and the ``prometheus_client``
    handler that sends them as a Basic ``Authorization`` header (percent-decoded): left in the
    URL, ``urllib`` takes them for part of the host name and no push ever arrives."""
    exposition = importlib.import_module("prometheus_client.exposition")
    if "://" not in url:  # "pushgateway:9091": http, as prometheus_client assumes
        url = "http://" + url
    credentials = redact.userinfo(url)
    if credentials is None:
        return url, exposition.default_handler
    user, password = credentials
    handler = functools.partial(exposition.basic_auth_handler, username=user, password=password)
    return redact.without_userinfo(url), handler


class PortInUseError(OSError):
    """The exporter's port is taken (or not allowed); the message names ``prometheus.port``."""


class _LatestValues:
    """The latest value of every metric: written by the writer, read by each scrape."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.lock = threading.Lock()
        self.values: dict[str, float] = {}
        self.names: dict[str, str] = {}  # trainmon name -> Prometheus name

    def update(self, records: Sequence[StepScalars]) -> bool:
        latest: dict[str, Number] = {}
        for record in records:
            latest.update(record.values)
        if not latest:
            return False
        names = self.names
        for name in latest:
            if name not in names:
                names[name] = metric_name(name, self.namespace)
        with self.lock:
            for name, value in latest.items():
                self.values[name] = _as_float(value)
        return True

    def snapshot(self) -> list[tuple[str, str, float]]:
        """(Prometheus name, trainmon name, value), sorted by Prometheus name."""
        with self.lock:
            items = list(self.values.items())
        names = self.names
        return sorted((names[name], name, value) for name, value in items)


def _as_float(value: Number) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond the range of a float
        return math.inf if value > 0 else -math.inf


class _Collector:
    """A ``prometheus_client`` collector: one gauge family per Prometheus name, read at scrape."""

    def __init__(self, latest: _LatestValues, labels: Mapping[str, str]) -> None:
        self._gauge = importlib.import_module("prometheus_client.core").GaugeMetricFamily
        self._latest = latest
        self._label_names = [*labels, "metric"]
        self._label_values = list(labels.values())

    def collect(self) -> Iterator[Any]:
        family: Any = None
        for prom_name, name, value in self._latest.snapshot():
            if family is None or family.name != prom_name:
                if family is not None:
                    yield family
                family = self._gauge(
                    prom_name,
                    f"Latest value of the trainmon metric {name}.",
                    labels=self._label_names,
                )
            family.add_metric([*self._label_values, name], value)
        if family is not None:
            yield family


class PrometheusWriter(Writer):
    """Serves (and/or pushes) the latest value of every metric as Prometheus gauges.

    ``job`` and ``rank`` label every series; ``port`` is the port actually served (the
    configured one plus the local rank when ``per_rank``; the system's pick for 0).
    """

    kind = "prometheus"

    def __init__(
        self,
        section: PrometheusConfig,
        place: ProcessPlace | None = None,
        *,
        job: str = "trainmon",
        per_rank: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        place = place or ProcessPlace()
        client = extras.require("prometheus_client", "prometheus", "The Prometheus writer")
        self.section = section
        self.job = section.job or job
        self.rank = place.rank
        self._latest = _LatestValues(section.namespace)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.url: str | None = None
        #: Pushes (and deletes) that failed: the Pushgateway was unreachable or refused them.
        self.push_errors = 0
        self._dirty = False
        self._pushed_once = False
        self._next_push = 0.0
        self._push_failing = False
        self._closed = False
        self._client = client
        where: list[str] = []
        if section.serve:
            offset = local_rank(env) if per_rank and section.port else 0
            try:
                self._serve(client, section.host, section.port + offset, offset)
            except PortInUseError as exc:
                if section.pushgateway_url is None:
                    raise
                _log.warning(
                    "%s; the Prometheus writer only pushes to %s",
                    exc,
                    redact.url(section.pushgateway_url),
                )
            else:
                where.append(str(self.url))
        self._push_registry: Any = None
        self._gateway = ""
        self._push_handler: Any = None
        if section.pushgateway_url is not None:
            self._gateway, self._push_handler = _push_target(section.pushgateway_url)
            self._push_registry = client.CollectorRegistry()
            self._push_registry.register(_Collector(self._latest, {}))
            shown = redact.url(section.pushgateway_url)
            where.append(f"{shown} job={self.job} rank={self.rank}")
        self.location = " and ".join(where) or "nowhere (serve is off and no pushgateway_url)"

    @classmethod
    def from_config(cls, config: TrainmonConfig, place: ProcessPlace) -> PrometheusWriter:
        """The writer for ``config.prometheus`` on this rank (the writer factory's entry point)."""
        from trainmon.writers.identity import run_identity

        return cls(
            config.prometheus,
            place,
            job=run_identity(config, place).name,
            per_rank=config.trainmon.per_rank_output,
        )

    def _serve(self, client: Any, host: str, port: int, offset: int) -> None:
        registry = client.CollectorRegistry()
        registry.register(_Collector(self._latest, {"job": self.job, "rank": str(self.rank)}))
        key = f"'prometheus.port' = {port - offset}" + (
            f" plus LOCAL_RANK {offset}" if offset else ""
        )
        try:
            started = client.start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                why = "is already in use" if exc.errno == errno.EADDRINUSE else "is not allowed"
                error: OSError = PortInUseError(
                    f"the Prometheus exporter cannot listen on {host}:{port}: the port {why} "
                    f"({key}); set 'prometheus.port' to a free port, or to 0 to let "
                    f"the system pick one"
                )
            else:
                error = OSError(
                    f"the Prometheus exporter cannot listen on {host}:{port} ('prometheus.host' "
                    f"= {host!r}, {key}): {exc.strerror or exc}"
                )
            error.errno = exc.errno
            raise error from None
        if isinstance(started, tuple):  # prometheus_client >= 0.20 returns (server, thread)
            self._server, self._thread = started
            self.port = int(self._server.server_address[1])
        else:
            self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/metrics"

    # ---- the writer contract -----------------------------------------------------------------

    def write(self, records: Sequence[StepScalars]) -> None:
        """Keep the latest value of each metric; the next scrape (or push) sees it."""
        if self._latest.update(records):
            self._dirty = True

    def flush(self) -> None:
        """Push to the Pushgateway when new values arrived and the push interval has passed."""
        if self._push_registry is None or not self._dirty:
            return
        now = time.monotonic()
        if now >= self._next_push:
            self._next_push = now + self.section.push_interval_s
            self._push()

    def close(self) -> None:
        """Push once more (and delete the group if asked), then stop the exporter. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._push_registry is not None:
                if self._dirty:
                    self._push()
                if self.section.delete_on_close and self._pushed_once:
                    self._delete()
        finally:
            server, self._server = self._server, None
            if server is not None:
                server.shutdown()
                server.server_close()
            if self._thread is not None:
                self._thread.join(5)

    # ---- Pushgateway ----------------------------------------------------------------------

    def _push(self) -> None:
        self._dirty = False
        try:
            self._client.push_to_gateway(
                self._gateway,
                job=self.job,
                registry=self._push_registry,
                grouping_key={"rank": str(self.rank)},
                timeout=self.section.timeout_s,
                handler=self._push_handler,
            )
        except Exception as exc:
            self._dirty = True  # the values are still to be pushed
            self._push_failed("push to", exc)
        else:
            self._pushed_once = True
            self._push_ok()

    def _delete(self) -> None:
        try:
            self._client.delete_from_gateway(
                self._gateway,
                job=self.job,
                grouping_key={"rank": str(self.rank)},
                timeout=self.section.timeout_s,
                handler=self._push_handler,
            )
        except Exception as exc:
            self._push_failed("delete the group on", exc)

    def _push_failed(self, what: str, exc: Exception) -> None:
        self.push_errors += 1
        if self._push_failing:
            return
        self._push_failing = True
        _log.warning(
            "Prometheus writer: could not %s the Pushgateway at %s (%s: %s; timeout %g s); "
            "training and the other writers carry on, and the latest values go with the next "
            "push (failed requests are counted in PrometheusWriter.push_errors, not printed)",
            what,
            redact.url(self.section.pushgateway_url or ""),
            type(exc).__name__,
            redact.text(first_line(exc), redact.url_secrets(self.section.pushgateway_url or "")),
            self.section.timeout_s,
        )

    def _push_ok(self) -> None:
        if self._push_failing:
            self._push_failing = False
            _log.info(
                "Prometheus writer: the Pushgateway at %s answers again (%d failed requests)",
                redact.url(self.section.pushgateway_url or ""),
                self.push_errors,
            )
