"""What the framework drivers share: a monitor built when first needed, and the step's phases.

Frameworks construct their callbacks and loggers before the process group exists (Lightning's
``ddp`` re-runs the script for rank 1 without ``RANK``), so :class:`LazyMonitor` builds the
:class:`~trainmon.Monitor` at the first hook that needs it, when the rank is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainmon.config import ConfigSource, TrainmonConfig, load_config
from trainmon.meters import PEAK_RSS_PROBE, RSS_PROBE, cuda_memory_mb
from trainmon.monitor import Monitor
from trainmon.pipeline import Item

# The step's phases, indices into PhaseClock's accumulators.
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
_PHASE_METRICS = (
    (DATA, "perf/data_ms"),
    (FORWARD, "perf/forward_ms"),
    (BACKWARD, "perf/backward_ms"),
    (OPTIMIZER, "perf/optimizer_ms"),
)


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

    def close(self) -> None:
        """Flush and close a monitor built here (a given one is left to its owner); run on
        every rank, since closing joins a final cross-rank gather. Idempotent."""
        if self._owned and self._monitor is not None and not self._closed:
            self._closed = True
            self._monitor.close()


class PhaseClock:
    """Splits host time between step ends into data, forward, backward, optimizer and other.

    A driver calls :meth:`switch` at each framework hook that starts a phase; the time since the
    previous switch goes to the phase that was running. The parts are disjoint and add up to
    the step time by construction; whatever no hook names is "other". :meth:`restart` drops
    time that belongs to no step (evaluation, checkpointing). Only ``perf_counter`` reads and
    float additions happen here.
    """

    __slots__ = ("_acc", "_breakdown", "_last", "_phase", "_samples", "_started", "memory")

    def __init__(self, samples_per_step: int, breakdown: bool, cuda_device: Any = None) -> None:
        self._samples = samples_per_step
        self._breakdown = breakdown
        self._acc = [0.0] * 5
        self._phase = OTHER
        now = time.perf_counter()
        self._started = now
        self._last = now
        #: a function returning CUDA memory numbers, or None on the CPU
        self.memory: Callable[[], tuple[float, float, float]] | None = (
            None if cuda_device is None else (lambda: cuda_memory_mb(cuda_device))
        )

    def restart(self, phase: int = DATA) -> None:
        """Start counting the next step from now (training or an epoch begins, after eval)."""
        now = time.perf_counter()
        self._acc = [0.0] * 5
        self._started = now
        self._last = now
        self._phase = phase

    def switch(self, phase: int) -> None:
        """From now on the step is in ``phase``."""
        now = time.perf_counter()
        self._acc[self._phase] += now - self._last
        self._last = now
        self._phase = phase

    def end(self, samples: int | None = None) -> list[Item]:
        """Close the step: its ``(name, value)`` pairs; the next step starts now, in DATA."""
        now = time.perf_counter()
        acc = self._acc
        acc[self._phase] += now - self._last
        step_s = now - self._started
        self._started = self._last = now
        self._phase = DATA
        done = self._samples if samples is None else samples
        items: list[Item] = [
            ("perf/step_time_ms", step_s * 1e3),
            ("perf/samples_per_sec", done / step_s if step_s > 0.0 else 0.0),
        ]
        if self._breakdown:
            items += [(name, acc[phase] * 1e3) for phase, name in _PHASE_METRICS]
        self._acc = [0.0] * 5
        items.append(("mem/rss_mb", RSS_PROBE))
        items.append(("mem/peak_rss_mb", PEAK_RSS_PROBE))
        if self.memory is not None:
            allocated, peak, reserved = self.memory()
            items += [
                ("mem/allocated_mb", allocated),
                ("mem/peak_allocated_mb", peak),
                ("mem/reserved_mb", reserved),
            ]
        return items


def cuda_device_of(module: Any) -> Any:
    """The CUDA device of ``module``'s first parameter, or None (CPU, no parameters)."""
    first = next(iter(module.parameters()), None) if module is not None else None
    device = getattr(first, "device", None)
    return device if getattr(device, "type", None) == "cuda" else None
