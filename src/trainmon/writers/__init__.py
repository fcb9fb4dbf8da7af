"""Backends, one module each, built from the config by :func:`build_writers`.

Each entry maps a config section to a factory; a backend's module (and its optional SDK) is
imported only when that section is enabled. A folder that cannot be written is reported once
and that writer is left out; a missing optional package raises at start-up with the fix.

Writers of the user's own come from the config's ``writers`` list (``{"class":
"package.module:Name", ...}``) or from names given to :func:`register_writer`; see
:mod:`trainmon.writers.custom`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from trainmon import extras, redact
from trainmon.config import TrainmonConfig
from trainmon.core.place import ProcessPlace
from trainmon.core.writer import NullWriter, Writer, WriterGroup
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.logging import get_logger
from trainmon.writers.custom import (
    build_custom_writer,
    check_custom_writer,
    register_writer,
    registered_writers,
    unregister_writer,
)
from trainmon.writers.deferred import DeferredWriter
from trainmon.writers.identity import RunIdentity, run_dir, run_identity

__all__ = [
    "NullWriter",
    "RunIdentity",
    "Writer",
    "WriterGroup",
    "build_custom_writer",
    "build_writers",
    "check_custom_writer",
    "register_writer",
    "registered_writers",
    "run_identity",
    "unregister_writer",
]

_log = get_logger("writers")


@dataclass(frozen=True)
class _Backend:
    section: str
    build: Callable[[TrainmonConfig, ProcessPlace], Writer]
    where: Callable[[TrainmonConfig], str]


def _tensorboard(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.tensorboard import TensorBoardWriter

    return TensorBoardWriter(run_dir(config, config.tensorboard, place))


def _csv(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.csv import CsvWriter

    return CsvWriter(run_dir(config, config.csv_monitor, place))


def _jsonl(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.jsonl import JsonlWriter

    section = config.jsonl
    directory = run_dir(config, section, place)
    return JsonlWriter(
        directory, section.job_name, place.rank, place.world_size, starts=dict(place.starts)
    )


def _console(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.console import ConsoleWriter

    stream = sys.stderr if config.console.stream == "stderr" else None
    every_rank = config.trainmon.per_rank_output and place.world_size > 1
    writer = ConsoleWriter(
        stream,
        total_steps=_total_steps(config),
        rank=place.rank if every_rank else None,
        world_size=place.world_size,
    )
    live = config.console.live
    writer.live = live == "on" or (live == "auto" and writer.is_terminal())
    return writer


def _wandb(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.wandb import WandbWriter

    return WandbWriter.from_config(config, place)


def _prometheus(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.prometheus import PrometheusWriter

    return PrometheusWriter.from_config(config, place)


def _prometheus_where(config: TrainmonConfig) -> str:
    section = config.prometheus
    where = [f"http://{section.host}:{section.port}/metrics"] if section.serve else []
    if section.pushgateway_url is not None:
        where.append(f"the Pushgateway at {section.pushgateway_url}")
    return " and ".join(where) or "nowhere"


def _mlflow(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.mlflow import MlflowWriter, bound_mlflow_requests, mlflow_secrets

    if not extras.is_installed("mlflow"):  # said at start; importing it waits for the lane
        extras.require("mlflow", "mlflow", "The MLflow writer")
    bound_mlflow_requests()
    uri = config.mlflow.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.lower().startswith(("http://", "https://")):
        return MlflowWriter.from_config(config, place)  # a local store: nothing to wait for
    # a server: connect and create the run on the writer's own thread, never the caller's
    return DeferredWriter(
        "mlflow",
        f"MLflow at {redact.credentials(uri)}",
        lambda: MlflowWriter.from_config(config, place),
        secrets=mlflow_secrets(uri),
    )


def _comet(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.comet import CometWriter

    return CometWriter.from_config(config, place)


def _total_steps(config: TrainmonConfig) -> int | None:
    """``trainmon.total_steps``, else DeepSpeed's ``scheduler.params.total_num_steps``."""
    if config.trainmon.total_steps is not None:
        return config.trainmon.total_steps
    scheduler = config.raw.get("scheduler")
    params = scheduler.get("params") if isinstance(scheduler, dict) else None
    total = params.get("total_num_steps") if isinstance(params, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


BACKENDS = (
    _Backend("tensorboard", _tensorboard, lambda c: str(c.tensorboard.job_dir())),
    _Backend("csv_monitor", _csv, lambda c: str(c.csv_monitor.job_dir())),
    _Backend("jsonl", _jsonl, lambda c: str(c.jsonl.job_dir())),
    _Backend("console", _console, lambda c: c.console.stream),
    _Backend("wandb", _wandb, lambda c: f"W&B project {c.wandb.project!r}"),
    _Backend("prometheus", _prometheus, _prometheus_where),
    _Backend(
        "mlflow",
        _mlflow,
        lambda c: f"MLflow at {c.mlflow.tracking_uri or 'the default tracking URI'}",
    ),
    _Backend("comet", _comet, lambda c: f"Comet project {c.comet.project or '(default)'}"),
)


def build_writers(config: TrainmonConfig, place: ProcessPlace) -> list[Writer]:
    """The enabled writers, then the config's own ``writers``; one that cannot start is
    reported (naming its path) and skipped, a config mistake raises :class:`ConfigError`
    (after closing the writers already started: no port or run is left open)."""
    writers: list[Writer] = []
    try:
        _build_into(writers, config, place)
    except BaseException:
        WriterGroup(writers).close()
        raise
    return writers


def _build_into(writers: list[Writer], config: TrainmonConfig, place: ProcessPlace) -> None:
    for backend in BACKENDS:
        if not getattr(config, backend.section).enabled:
            continue
        try:
            writer = backend.build(config, place)
            writer.every = getattr(getattr(config, backend.section), "every", "step")
            writers.append(writer)
        except (MissingExtraError, ConfigError):
            raise
        except Exception as exc:
            _log.warning(
                "%s writer disabled: cannot write to %s (%s: %s); the other writers and "
                "training carry on",
                backend.section,
                redact.credentials_in(backend.where(config)),
                type(exc).__name__,
                redact.credentials_in(str(exc)),
            )
    for index, spec in enumerate(config.writers or ()):
        try:
            writers.append(build_custom_writer(index, spec))
        except (MissingExtraError, ConfigError):
            raise
        except Exception as exc:
            _log.warning(
                "writers[%d] (%s) disabled: it could not start (%s: %s); the other writers "
                "and training carry on",
                index,
                spec.get("class"),
                type(exc).__name__,
                exc,
            )
