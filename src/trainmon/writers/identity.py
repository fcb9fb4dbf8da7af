"""The run as every writer and alert sink names it: one name, one folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainmon.config import DEFAULT_JOB_NAME, OutputSection, TrainmonConfig
from trainmon.core.place import ProcessPlace


def run_dir(config: TrainmonConfig, section: OutputSection, place: ProcessPlace) -> Path:
    """``<output_path>/<job_name>``, plus ``rank-<r>`` when every rank writes its own output."""
    base = section.job_dir()
    return base / f"rank-{place.rank}" if config.trainmon.per_rank_output else base


@dataclass(frozen=True)
class RunIdentity:
    """The run as every writer and alert sink names it: one name, one folder."""

    name: str
    run_dir: Path | None  # None when no file writer is enabled


def run_identity(config: TrainmonConfig, place: ProcessPlace) -> RunIdentity:
    """The run's name and folder, the one answer for W&B, MLflow, Comet, Prometheus and alerts.

    Both come from the first enabled file writer, in the order JSONL, TensorBoard, CSV (its
    ``job_name`` and :func:`run_dir`); with none enabled the name is DeepSpeed's default job
    name and there is no folder.
    """
    for section in (config.jsonl, config.tensorboard, config.csv_monitor):
        if section.enabled:
            return RunIdentity(section.job_name, run_dir(config, section, place))
    return RunIdentity(DEFAULT_JOB_NAME, None)
