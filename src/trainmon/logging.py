"""Rank-aware library logging: the ``trainmon`` logger, ``log_dist`` and ``configure_logging``.

The library logs through its own ``trainmon`` logger, which has its own handlers and does not
propagate: the root logger is never configured or touched. Every record carries the rank it
came from and is printed as ``[trainmon] [Rank r] LEVEL message``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import TextIO

from trainmon.core.place import discover

LOGGER_NAME = "trainmon"
DEFAULT_FORMAT = "[trainmon] [Rank %(rank)s] %(levelname)s %(message)s"
_OURS = "_trainmon_handler"


def current_rank() -> int:
    """This process's rank, looked up now (``torch.distributed`` may be initialised later)."""
    return discover().rank


class RankFilter(logging.Filter):
    """Stamps ``record.rank`` and lets through only records of the chosen ranks."""

    def __init__(self, ranks: Collection[int] | None = None) -> None:
        super().__init__()
        self.ranks = None if ranks is None or -1 in ranks else frozenset(ranks)

    def filter(self, record: logging.LogRecord) -> bool:
        rank = current_rank()
        record.rank = rank
        return self.ranks is None or rank in self.ranks


def _handler(handler: logging.Handler, ranks: Collection[int] | None, fmt: str) -> logging.Handler:
    handler.addFilter(RankFilter(ranks))
    handler.setFormatter(logging.Formatter(fmt))
    setattr(handler, _OURS, True)
    return handler


def get_logger(name: str | None = None) -> logging.Logger:
    """The library's logger (or a child); set up once with a stderr handler, no propagation."""
    base = logging.getLogger(LOGGER_NAME)
    if not getattr(base, "_trainmon_configured", False):
        base.addHandler(_handler(logging.StreamHandler(sys.stderr), None, DEFAULT_FORMAT))
        base.setLevel(logging.INFO)
        base.propagate = False
        base._trainmon_configured = True  # type: ignore[attr-defined]
    return base if name is None else base.getChild(name)


def rank_file(file: str | os.PathLike[str], rank: int) -> Path:
    """``train.log`` → ``train.rank-3.log``; a ``{rank}`` placeholder is filled in instead."""
    text = os.fspath(file)
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank)))
    path = Path(text)
    return path.with_name(f"{path.stem}.rank-{rank}{path.suffix}")


def configure_logging(
    level: int | str = logging.INFO,
    file: str | os.PathLike[str] | None = None,
    ranks: Collection[int] | None = None,
    *,
    per_rank_file: bool = False,
    stream: TextIO | None = sys.stderr,
    fmt: str = DEFAULT_FORMAT,
) -> logging.Logger:
    """Set trainmon's log level and destinations (the seed's ``configure_logging``).

    ``file`` adds a log file (``per_rank_file=True`` or a ``{rank}`` placeholder gives each
    rank its own); ``ranks`` limits output to those ranks (None or ``[-1]``: every rank);
    ``stream=None`` silences the console. Replaces the handlers trainmon installed before.
    """
    base = get_logger()
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValueError(f"configure_logging: level {level!r} is not a logging level name")
        level = resolved
    base.setLevel(level)
    for handler in [h for h in base.handlers if getattr(h, _OURS, False)]:
        base.removeHandler(handler)
        if isinstance(handler, logging.FileHandler):
            handler.close()
    if stream is not None:
        base.addHandler(_handler(logging.StreamHandler(stream), ranks, fmt))
    if file is not None:
        path = (
            rank_file(file, current_rank())
            if per_rank_file or "{rank}" in os.fspath(file)
            else Path(file)
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        base.addHandler(_handler(logging.FileHandler(path, encoding="utf-8"), ranks, fmt))
    return base


def log_dist(message: str, ranks: Collection[int] | None = (0,), level: int = logging.INFO) -> None:
    """Log ``message`` on the given ranks only (None or ``[-1]``: on every rank)."""
    if ranks is None or -1 in ranks or current_rank() in ranks:
        get_logger().log(level, message)
