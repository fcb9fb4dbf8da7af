"""The user callback contract: subclass :class:`Callback` and override the hooks you need.

The base class replaces probing arbitrary objects with ``getattr``: the Monitor calls each hook
directly, and registers a window observer only for callbacks that override ``on_window_end``.
"""

from __future__ import annotations

from typing import Any

from trainmon.core.aggregate import WindowStats
from trainmon.core.alert import Alert

HOOKS = ("on_step_end", "on_window_end", "on_alert")


class Callback:
    """Hooks the Monitor calls; each default does nothing.

    ``on_step_end`` runs on the training thread after each optimizer step (keep it cheap; it
    may raise :class:`~trainmon.TrainingStopped`); ``on_window_end`` and ``on_alert`` run on
    the background thread, where an exception is reported once and the run carries on.
    """

    def on_step_end(self, engine: Any, step: int) -> None:
        """After optimizer step ``step``; ``engine`` is whatever drives the loop (or None)."""

    def on_window_end(self, stats: WindowStats) -> None:
        """A completed window: count/mean/min/max/last per metric, cross-rank ones included."""

    def on_alert(self, alert: Alert) -> None:
        """An alert fired or resolved (after the stop request, if its rule asked for one)."""


def overrides(callback: Callback, hook: str) -> bool:
    """Whether ``callback`` does something in ``hook`` (its class overrides the default)."""
    return getattr(type(callback), hook) is not getattr(Callback, hook)


class _Adapted(Callback):
    """A plain object with some of the hooks, accepted as before the base class existed."""

    def __init__(self, target: Any) -> None:
        self.target = target
        for hook in HOOKS:
            method = getattr(target, hook, None)
            if callable(method):
                setattr(self, hook, method)

    def __repr__(self) -> str:
        return repr(self.target)


def as_callback(callback: Any) -> Callback:
    """``callback`` itself when it is a :class:`Callback`, else an adapter over its hooks;
    TypeError when it has none of them."""
    if isinstance(callback, Callback):
        return callback
    if not any(callable(getattr(callback, hook, None)) for hook in HOOKS):
        raise TypeError(
            f"add_callback: {callback!r} is not a trainmon.Callback and has none of "
            f"{', '.join(HOOKS)}"
        )
    return _Adapted(callback)


def has_hook(callback: Callback, hook: str) -> bool:
    """Whether calling ``hook`` on ``callback`` can do anything (overridden or adapted)."""
    if isinstance(callback, _Adapted):
        return hook in vars(callback)
    return overrides(callback, hook)
