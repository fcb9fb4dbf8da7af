"""Shared fixtures: configs pointing every writer into a temporary folder."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def local_config(base: Path, **extra: Any) -> dict[str, Any]:
    """A DeepSpeed-style config with TensorBoard, CSV and JSONL under ``base``, console off."""
    config: dict[str, Any] = {
        "train_batch_size": 64,
        "steps_per_print": 50,
        "tensorboard": {"enabled": True, "output_path": str(base / "tb"), "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": str(base / "csv"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
    }
    config.update(extra)
    return config


@pytest.fixture
def trainmon_logs() -> Iterator[list[logging.LogRecord]]:
    """Records the ``trainmon`` logger emits (it does not propagate to the root logger)."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = _Keep(level=logging.DEBUG)
    logger = logging.getLogger("trainmon")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
