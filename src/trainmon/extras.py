"""Optional dependencies: checked without importing, imported only by the backend using them."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from trainmon.errors import MissingExtraError


def is_installed(module: str) -> bool:
    """True when ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming the pip command."""
    if not is_installed(module):
        raise MissingExtraError(module.split(".")[0], extra, feature)
    return importlib.import_module(module)
