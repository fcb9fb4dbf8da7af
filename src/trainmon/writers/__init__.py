"""Backends, one module each, built from the config by :func:`build_writers`.

Each entry maps a config section to a factory; a backend's module (and its optional SDK) is
imported only when that section is enabled. A folder that cannot be written is reported once
and that writer is left out; a missing optional package raises at start-up with the fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainmon.config import OutputSection, TrainmonConfig
from trainmon.distributed import ProcessPlace
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.logging import get_logger
from trainmon.writers.base import NullWriter, Writer, WriterGroup

__all__ = ["NullWriter", "Writer", "WriterGroup", "build_writers"]

_log = get_logger("writers")


@dataclass(frozen=True)
class _Backend:
    section: str
    build: Callable[[TrainmonConfig, ProcessPlace], Writer]
    where: Callable[[TrainmonConfig], str]


def output_dir(config: TrainmonConfig, section: OutputSection, place: ProcessPlace) -> Path:
    """``<output_path>/<job_name>``, plus ``rank-<r>`` when every rank writes its own output."""
    base = section.run_dir()
    return base / f"rank-{place.rank}" if config.trainmon.per_rank_output else base


def _tensorboard(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.tensorboard import TensorBoardWriter

    return TensorBoardWriter(output_dir(config, config.tensorboard, place))


def _csv(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.csv import CsvWriter

    return CsvWriter(output_dir(config, config.csv_monitor, place))


def _jsonl(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.jsonl import JsonlWriter

    section = config.jsonl
    directory = output_dir(config, section, place)
    return JsonlWriter(directory, section.job_name, place.rank, place.world_size)


def _console(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.console import ConsoleWriter

    stream = sys.stderr if config.console.stream == "stderr" else None
    return ConsoleWriter(stream, total_steps=_total_steps(config))


def _wandb(config: TrainmonConfig, place: ProcessPlace) -> Writer:
    from trainmon.writers.wandb import WandbWriter

    return WandbWriter.from_config(config, place)


def _total_steps(config: TrainmonConfig) -> int | None:
    """DeepSpeed's ``scheduler.params.total_num_steps``, when the config has one."""
    scheduler = config.raw.get("scheduler")
    params = scheduler.get("params") if isinstance(scheduler, dict) else None
    total = params.get("total_num_steps") if isinstance(params, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


BACKENDS = (
    _Backend("tensorboard", _tensorboard, lambda c: str(c.tensorboard.run_dir())),
    _Backend("csv_monitor", _csv, lambda c: str(c.csv_monitor.run_dir())),
    _Backend("jsonl", _jsonl, lambda c: str(c.jsonl.run_dir())),
    _Backend("console", _console, lambda c: c.console.stream),
    _Backend("wandb", _wandb, lambda c: f"W&B project {c.wandb.project!r}"),
)


def build_writers(config: TrainmonConfig, place: ProcessPlace) -> list[Writer]:
    """The enabled writers; one that cannot start is reported (naming its path) and skipped."""
    writers: list[Writer] = []
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
                backend.where(config),
                type(exc).__name__,
                exc,
            )
    for section in ("comet",):
        if getattr(config, section).enabled:
            _log.warning(
                "'%s.enabled' is set, but this trainmon version has no %s writer yet; "
                "the other writers carry on",
                section,
                section,
            )
    return writers
