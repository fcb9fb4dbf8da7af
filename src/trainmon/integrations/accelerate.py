"""The Accelerate driver: ``Accelerator(log_with=[TrainmonTracker(config)])``.

``accelerator.init_trackers(...)`` calls :meth:`TrainmonTracker.start` (the monitor is built
there, once Accelerate's process state exists), ``accelerator.log(values, step=...)`` reaches
trainmon's writers, and ``accelerator.end_training()`` calls :meth:`TrainmonTracker.finish`,
which flushes and closes it before Accelerate destroys the process group. Accelerate runs
trackers on the main process only. Importing this module imports accelerate
(``pip install "trainmon[accelerate]"``); ``import trainmon`` does not.

Checkpoints: ``accelerator.save_state`` and ``load_state`` are timed into the journal as
``checkpoint_save`` / ``checkpoint_load`` spans (``trainmon goodput``). Accelerate gives a
tracker no handle on its Accelerator, so :meth:`TrainmonTracker.start` takes the one whose
``init_trackers`` called it (the caller's ``self``) and wraps those two methods on that
instance; :meth:`TrainmonTracker.watch` does it by hand (e.g. for a ``load_state`` before
``init_trackers``). Accelerate has no evaluation loop of its own: time yours with
``with accelerator.get_tracker("trainmon", unwrap=True).span("eval"):`` (``eval_s``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainmon.collect.instrument import StepInstrument
from trainmon.config import ConfigSource
from trainmon.extras import require
from trainmon.integrations.common import LazyMonitor, record_hparams
from trainmon.monitor import Monitor

_tracking = require("accelerate.tracking", "accelerate", "trainmon.integrations.accelerate")
GeneralTracker: Any = _tracking.GeneralTracker
#: The Accelerator methods timed as journal spans, and the span's kind.
_TIMED = (("save_state", "checkpoint_save"), ("load_state", "checkpoint_load"))


class TrainmonTracker(GeneralTracker):  # type: ignore[misc]
    """An Accelerate tracker writing through a :class:`~trainmon.Monitor`.

    Metric names are kept as given. With ``samples_per_step`` (this process's samples per
    optimizer step, e.g. batch size × accumulation), each new ``step`` given to
    ``accelerator.log`` also closes one training step of a
    :class:`~trainmon.collect.instrument.StepInstrument`: ``perf/step_time_ms`` (the time since the
    previous new step; from the second logged step on), ``perf/samples_per_sec``
    (``samples_per_step`` over that time) and ``mem/*``; log once per optimizer step for these
    to be per step. A stop asked by an alert rule is :attr:`stop_reason` (Accelerate has no
    stop flag: poll it). ``accelerator.save_state`` / ``load_state`` are timed as checkpoint
    spans (see the module doc) and not counted in the next step's time.
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
        self._watched: list[tuple[Any, str]] = []  # (accelerator, method) wrapped here
        self._finished = False
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
        accelerator = _calling_accelerator(self)
        if accelerator is not None:
            self.watch(accelerator)

    def watch(self, accelerator: Any) -> None:
        """Time ``accelerator.save_state`` and ``load_state`` into the journal as checkpoint
        spans (instance attributes, removed by :meth:`finish`). :meth:`start` calls it for the
        Accelerator whose ``init_trackers`` started this tracker; call it yourself to time a
        load before ``init_trackers``. Only on the main process (the one with a tracker);
        idempotent."""
        if not getattr(accelerator, "is_main_process", True) or self._finished:
            return
        for name, kind in _TIMED:
            original = getattr(accelerator, name, None)
            if callable(original) and name not in vars(accelerator):
                setattr(accelerator, name, self._timed(original, kind))
                self._watched.append((accelerator, name))

    def _timed(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                if not self._finished:
                    monitor = self._lazy.get(all_ranks_log=False)
                    monitor.record_span(kind, started, time.time())
                    if self._instrument is not None:
                        self._instrument.restart()  # not part of the next step's time

        return timed

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
        """Flush and close the monitor (``end_training`` calls this); the Accelerator's
        ``save_state`` and ``load_state`` are its class's own again."""
        self._finished = True
        for accelerator, name in self._watched:
            if name in vars(accelerator):
                delattr(accelerator, name)
        self._watched = []
        inst, self._instrument = self._instrument, None
        if inst is not None:
            inst.close()
        self._lazy.close()


def _calling_accelerator(tracker: Any) -> Any:
    """The Accelerator whose ``init_trackers`` is running ``tracker.start()``: ``self`` two
    frames up, when it is an Accelerator holding ``tracker`` (else None: started by hand)."""
    accelerator_class: Any = importlib.import_module("accelerate").Accelerator
    here = inspect.currentframe()  # this function ← start() ← init_trackers
    caller = here.f_back.f_back if here is not None and here.f_back is not None else None
    owner = caller.f_locals.get("self") if caller is not None else None
    if isinstance(owner, accelerator_class) and any(t is tracker for t in owner.trackers):
        return owner
    return None


__all__ = ["TrainmonTracker"]
