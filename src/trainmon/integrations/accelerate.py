"""The Accelerate driver: ``Accelerator(log_with=[TrainmonTracker(config)])``.

``accelerator.init_trackers(...)`` calls :meth:`TrainmonTracker.start` (the monitor is built
there, once Accelerate's process state exists), ``accelerator.log(values, step=...)`` reaches
trainmon's writers, and ``accelerator.end_training()`` calls :meth:`TrainmonTracker.finish`,
which flushes and closes it before Accelerate destroys the process group. Accelerate runs
trackers on the main process only. Importing this module imports accelerate
(``pip install "trainmon[accelerate]"``); ``import trainmon`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmon.collect.instrument import StepInstrument
from trainmon.config import ConfigSource
from trainmon.extras import require
from trainmon.integrations.common import LazyMonitor, record_hparams
from trainmon.monitor import Monitor

_tracking = require("accelerate.tracking", "accelerate", "trainmon.integrations.accelerate")
GeneralTracker: Any = _tracking.GeneralTracker


class TrainmonTracker(GeneralTracker):  # type: ignore[misc]
    """An Accelerate tracker writing through a :class:`~trainmon.Monitor`.

    Metric names are kept as given. With ``samples_per_step`` (this process's samples per
    optimizer step, e.g. batch size × accumulation), each new ``step`` given to
    ``accelerator.log`` also closes one training step of a
    :class:`~trainmon.collect.instrument.StepInstrument`: ``perf/step_time_ms`` (the time since the
    previous new step; from the second logged step on), ``perf/samples_per_sec``
    (``samples_per_step`` over that time) and ``mem/*``; log once per optimizer step for these
    to be per step. A stop asked by an alert rule is :attr:`stop_reason` (Accelerate has no
    stop flag: poll it).
    """

    name = "trainmon"
    requires_logging_directory = False
    main_process_only = True

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        monitor: Monitor | None = None,
        samples_per_step: float | None = None,
    ) -> None:
        super().__init__()
        self._lazy = LazyMonitor(config, monitor)
        self._samples_per_step = samples_per_step
        self._instrument: StepInstrument | None = None
        self._last_step: int | None = None
        #: what ``init_trackers(config=...)`` stored (``store_init_configuration``)
        self.init_configuration: dict[str, Any] = {}

    @property
    def tracker(self) -> Monitor | None:
        """The monitor (Accelerate's "internal tracking object"); None before ``start``."""
        return self._lazy.built

    @property
    def stop_reason(self) -> str | None:
        """Why an alert rule asked to stop, or None."""
        monitor = self._lazy.built
        return monitor.stop_reason if monitor is not None else None

    def start(self) -> None:
        """Build the monitor (``init_trackers`` calls this after the process state exists)."""
        monitor = self._lazy.get(all_ranks_log=False)
        if self._samples_per_step is not None and self._instrument is None:
            self._instrument = StepInstrument(
                monitor, samples_per_step=self._samples_per_step, breakdown=False
            )

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Keep the run's hyper-parameters in :attr:`init_configuration` and record them with
        ``Monitor.log_hparams`` (the journal, TensorBoard's HParams, W&B's config, MLflow's
        params); a mapping trainmon cannot store is kept here only, with one warning."""
        self.init_configuration.update(values)
        record_hparams(self._lazy.get(all_ranks_log=False), self.init_configuration)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record the numbers in ``values`` at ``step`` (text values are left out)."""
        monitor = self._lazy.get(all_ranks_log=False)
        inst = self._instrument
        if inst is not None and step is not None and step != self._last_step:
            if self._last_step is None:
                inst.restart()  # the first step has no start to measure from
            else:
                inst.step_end(step)
            self._last_step = step
        numbers = {k: v for k, v in values.items() if not isinstance(v, (str, bytes))}
        if numbers:
            monitor.log(numbers, step=step)

    def finish(self) -> None:
        """Flush and close the monitor (``end_training`` calls this)."""
        inst, self._instrument = self._instrument, None
        if inst is not None:
            inst.close()
        self._lazy.close()


__all__ = ["TrainmonTracker"]
