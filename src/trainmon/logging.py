"""Library logging: a ``trainmon`` logger with its own stderr handler; never the root logger."""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "trainmon"
_FORMAT = "[trainmon] %(levelname)s %(message)s"


def get_logger(name: str | None = None) -> logging.Logger:
    """The library's logger (or a child); set up once with a stderr handler, no propagation."""
    base = logging.getLogger(LOGGER_NAME)
    if not getattr(base, "_trainmon_configured", False):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        base.addHandler(handler)
        base.setLevel(logging.INFO)
        base.propagate = False
        base._trainmon_configured = True  # type: ignore[attr-defined]
    return base if name is None else base.getChild(name)
