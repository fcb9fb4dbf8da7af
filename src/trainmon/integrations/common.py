"""What the framework drivers share: a monitor built when first needed.

Frameworks construct their callbacks and loggers before the process group exists (Lightning's
``ddp`` re-runs the script for rank 1 without ``RANK``), so :class:`LazyMonitor` builds the
:class:`~trainmon.Monitor` at the first hook that needs it, when the rank is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmon.config import ConfigSource, TrainmonConfig, load_config
from trainmon.core.writer import RunStatus
from trainmon.logging import get_logger
from trainmon.monitor import Monitor

_log = get_logger("integrations")


class LazyMonitor:
    """A :class:`~trainmon.Monitor` built on first use, so it sees the process group's rank.

    ``monitor`` given: that one is used and never closed here (its owner closes it).
    """

    def __init__(self, config: ConfigSource = None, monitor: Monitor | None = None) -> None:
        self.config: TrainmonConfig = monitor.config if monitor is not None else load_config(config)
        self._monitor = monitor
        self._owned = monitor is None
        self._closed = False

    @property
    def built(self) -> Monitor | None:
        """The monitor if it exists already (None before first use and after close)."""
        return None if self._closed else self._monitor

    def get(self, *, all_ranks_log: bool = False) -> Monitor:
        """The monitor, built now if needed; ``all_ranks_log`` (every rank logs every step)
        allows cross-rank statistics and is decided by the first call that builds it."""
        monitor = self._monitor
        if monitor is None:
            monitor = self._monitor = Monitor(self.config, all_ranks_log=all_ranks_log)
        return monitor

    def close(self, status: RunStatus = "success") -> None:
        """Flush and close a monitor built here (a given one is left to its owner), telling
        its writers ``status``; run on every rank, since closing joins a final cross-rank
        gather. Idempotent."""
        if self._owned and self._monitor is not None and not self._closed:
            self._closed = True
            self._monitor.close(status)


def device_of(module: Any) -> Any:
    """The device of ``module``'s first parameter (None without parameters): the step
    instrument times phases with CUDA events and reads CUDA memory on a CUDA device."""
    first = next(iter(module.parameters()), None) if module is not None else None
    return getattr(first, "device", None)


def record_hparams(monitor: Monitor, hparams: Mapping[str, Any]) -> None:
    """Give a framework's hyper-parameters to ``monitor.log_hparams``; a mapping it refuses
    (a non-string key, a cycle) is skipped with one warning instead of failing the framework."""
    try:
        monitor.log_hparams(hparams)
    except (TypeError, ValueError, RecursionError) as error:
        _log.warning("hyper-parameters not recorded: %s", error)
