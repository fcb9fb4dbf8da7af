"""The Comet writer, with DeepSpeed's ``comet`` keys and semantics.

Everything after the start runs on the background thread; Comet uploads from its own threads,
so :meth:`flush` has nothing to do and :meth:`close` waits for the upload in ``end()``.
Behaviour is in the README ("Backend details").
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from trainmon import extras
from trainmon.config import DEFAULT_JOB_NAME, CometConfig, TrainmonConfig
from trainmon.core.events import Number, StepScalars
from trainmon.core.place import ProcessPlace
from trainmon.core.writer import Writer
from trainmon.errors import ConfigError, first_line
from trainmon.logging import get_logger

_log = get_logger("comet")


class LogScheduler:
    """DeepSpeed's ``EventsLogScheduler``: log a metric when first seen, then once its step
    has advanced by at least ``interval`` since it was last logged."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self._last: dict[str, int] = {}

    def needs_logging(self, name: str, step: int) -> bool:
        """Whether ``name`` at ``step`` is logged (and, if so, remember ``step``)."""
        last = self._last.get(name)
        if last is None or step - last >= self.interval:
            self._last[name] = step
            return True
        return False


class CometWriter(Writer):
    """Logs scalars to a Comet experiment, every ``samples_log_interval`` per metric.

    ``per_rank`` names the experiment ``<experiment_name or job>-rank<r>`` (each rank then has
    an experiment of its own, so a fixed ``experiment_key`` is refused).
    """

    kind = "comet"

    def __init__(
        self,
        section: CometConfig,
        place: ProcessPlace | None = None,
        *,
        per_rank: bool = False,
        job: str = DEFAULT_JOB_NAME,
    ) -> None:
        place = place or ProcessPlace()
        if per_rank and section.experiment_key and place.world_size > 1:
            raise ConfigError(
                f"'comet.experiment_key' = {section.experiment_key!r} names one experiment, but "
                f"with trainmon.per_rank_output every rank logs an experiment of its own; "
                f"remove comet.experiment_key or turn per_rank_output off"
            )
        comet_ml = extras.require("comet_ml", "comet", "The Comet writer")
        self._experiment = _start(comet_ml, section)
        name = section.experiment_name
        if per_rank:
            name = f"{name or job}-rank{place.rank}"
        if name is not None:
            self._experiment.set_name(name)
        self._scheduler = LogScheduler(section.samples_log_interval)
        self.location = _describe(self._experiment, section)
        self._failed = False
        self._closed = False

    @classmethod
    def from_config(cls, config: TrainmonConfig, place: ProcessPlace) -> CometWriter:
        """The writer for ``config.comet`` on this rank (the writer factory's entry point)."""
        from trainmon.writers.identity import run_identity

        return cls(
            config.comet,
            place,
            per_rank=config.trainmon.per_rank_output,
            job=run_identity(config, place).name,
        )

    @property
    def experiment(self) -> Any:
        """The ``comet_ml`` experiment (as DeepSpeed's ``CometMonitor.experiment``)."""
        return self._experiment

    def write(self, records: Sequence[StepScalars]) -> None:
        """One ``log_metrics`` per step, holding the metrics due at that step."""
        if self._failed:
            raise RuntimeError("the Comet writer stopped after an earlier Comet error")
        due = self._scheduler.needs_logging
        try:
            for record in records:
                step = record.step
                values: dict[str, Number] = {
                    name: value for name, value in record.values.items() if due(name, step)
                }
                if values:
                    self._experiment.log_metrics(values, step=step)
        except Exception:
            self._failed = True
            raise

    def flush(self) -> None:
        """Nothing to do: Comet sends (or, offline, stores) from its own threads."""

    def close(self) -> None:
        """End the experiment (Comet waits for its upload, or writes the offline zip), once."""
        if self._closed:
            return
        self._closed = True
        self._experiment.end()


def _start(comet_ml: ModuleType, section: CometConfig) -> Any:
    """``comet_ml.start`` with DeepSpeed's arguments; offline, with a warning, if online fails."""
    kwargs: dict[str, Any] = {
        "api_key": section.api_key,
        "workspace": section.workspace,
        project_keyword(comet_ml): section.project,
        "experiment_key": section.experiment_key,
        "mode": section.mode,
        "online": section.online,
    }
    try:
        return comet_ml.start(**kwargs)
    except Exception as exc:
        if section.online is not None or section.mode == "get":
            raise
        experiment = comet_ml.start(**{**kwargs, "online": False})
        _log.warning(
            "comet_ml.start failed (%s: %s), so the Comet experiment is logged offline to %s; "
            "upload it later with: comet upload <the experiment's .zip in that folder>",
            type(exc).__name__,
            first_line(exc),
            _offline_directory(experiment),
        )
        return experiment


def project_keyword(comet_ml: ModuleType) -> str:
    """``project_name`` where ``comet_ml.start`` takes it (newer SDKs), else ``project``."""
    try:
        parameters = inspect.signature(comet_ml.start).parameters
    except (TypeError, ValueError):
        return "project"
    return "project_name" if "project_name" in parameters else "project"


def _offline_directory(experiment: Any) -> str:
    for attribute in ("offline_directory", "_offline_directory"):
        value = getattr(experiment, attribute, None)
        if isinstance(value, str) and value:
            return value
    return "Comet's offline folder (COMET_OFFLINE_DIRECTORY)"


def _describe(experiment: Any, section: CometConfig) -> str:
    url = getattr(experiment, "url", None)
    if isinstance(url, str) and url:
        return url
    project = section.project or "(default project)"
    return f"Comet project {project}"
