"""The Lightning driver: a ``Logger`` for what ``self.log`` logs, a ``Callback`` for each step.

::

    logger = TrainmonLogger(config)
    trainer = Trainer(logger=logger, callbacks=[TrainmonCallback(logger=logger)])

Works with ``lightning.pytorch`` or ``pytorch_lightning``: the one already imported, else the one
installed. Nothing is built before the trainer's process group exists (Lightning's ``ddp``
re-runs the script for the other ranks without ``RANK``); the monitor is made at the first hook
that needs it.
"""

from __future__ import annotations

import importlib
import sys
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from trainmon.config import ConfigSource
from trainmon.errors import MissingExtraError
from trainmon.extras import is_installed
from trainmon.integrations.common import (
    BACKWARD,
    DATA,
    FORWARD,
    OPTIMIZER,
    OTHER,
    LazyMonitor,
    PhaseClock,
    cuda_device_of,
)
from trainmon.logging import get_logger
from trainmon.meters import total_grad_norm
from trainmon.monitor import Monitor
from trainmon.pipeline import Item

_log = get_logger("lightning")


def _lightning_package() -> str:
    """``lightning.pytorch`` or ``pytorch_lightning``: the one imported already, else installed."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        if name in sys.modules:
            return name
    for name in ("lightning.pytorch", "pytorch_lightning"):
        if is_installed(name.split(".")[0]) and is_installed(name):
            return name
    raise MissingExtraError("pytorch_lightning", "lightning", "trainmon.integrations.lightning")


PACKAGE = _lightning_package()
_pl = importlib.import_module(PACKAGE)
_Logger: Any = importlib.import_module(PACKAGE + ".loggers").Logger
_Callback: Any = _pl.Callback
_extract_batch_size: Any = importlib.import_module(PACKAGE + ".utilities.data").extract_batch_size


class TrainmonLogger(_Logger):  # type: ignore[misc]
    """A Lightning ``Logger`` writing what ``self.log(...)`` logs through trainmon's writers.

    With a :class:`TrainmonCallback` in the same trainer, values go to the trainer's
    ``global_step`` (the step of the callback's per-step signals) and both share one monitor;
    made with ``TrainmonCallback(logger=logger)``, every rank's windows are also gathered
    (cross-rank statistics; Lightning builds the logger's monitor before callbacks are set up);
    alone, they go to the step Lightning passes (for training-step logs that is one less than
    ``global_step``, Lightning's own convention). Hyper-parameters are kept in
    :attr:`hyperparams`. ``finalize`` closes the monitor.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        monitor: Monitor | None = None,
        name: str = "trainmon",
        version: str | int = 0,
    ) -> None:
        super().__init__()
        self._lazy = LazyMonitor(config, monitor)
        self._name = name
        self._version = version
        self._trainer: Any = None
        self._every_rank = False
        #: what ``log_hyperparams`` was given (Lightning passes the module's ``hparams``)
        self.hyperparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        """The logger's name (Lightning uses it in folder names)."""
        return self._name

    @property
    def version(self) -> str | int:
        """The run's version (Lightning uses it in folder names)."""
        return self._version

    @property
    def experiment(self) -> Monitor:
        """The :class:`~trainmon.Monitor` (built on first access)."""
        return self._lazy.get(all_ranks_log=self._every_rank)

    def share(self) -> LazyMonitor:
        """Called by a :class:`TrainmonCallback` made with ``logger=``: every rank then logs every
        step, so the monitor (built later, by the first use) gathers cross-rank statistics.
        Returns the monitor both use."""
        self._every_rank = True
        return self._lazy

    def bind(self, trainer: Any) -> LazyMonitor:
        """Called by :class:`TrainmonCallback` at set-up: log at ``trainer.global_step``."""
        self._trainer = trainer
        return self._lazy

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record Lightning's metrics (already numbers) at the trainer's global step."""
        trainer = self._trainer
        if trainer is not None:
            step = trainer.global_step
        values = {k: v for k, v in metrics.items() if not isinstance(v, (str, bytes))}
        if values:
            self.experiment.log(values, step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        """Keep the hyper-parameters in :attr:`hyperparams`."""
        self.hyperparams.update(vars(params) if isinstance(params, Namespace) else dict(params))

    def save(self) -> None:
        """Nothing to do: the monitor's background thread flushes by itself."""

    def finalize(self, status: str) -> None:
        """Flush and close the monitor (every rank); ``status`` is "success" or "failed"."""
        if status != "success":
            _log.info("Lightning run ended with status %r", status)
        self._lazy.close()


class TrainmonCallback(_Callback):  # type: ignore[misc]
    """Per optimizer step: step time, throughput, breakdown, grad norm, loss and memory.

    ``perf/samples_per_sec`` counts the samples of the step's batches (Lightning's
    ``extract_batch_size``). With ``wall_clock_breakdown``: ``perf/data_ms`` (previous step's
    end → batch start), ``perf/forward_ms`` (batch start → ``on_before_backward``: the
    ``training_step``), ``perf/backward_ms`` (through ``on_after_backward``, DDP's gradient
    all-reduce included), ``perf/optimizer_ms`` (``on_before_optimizer_step`` → batch end).
    ``train/grad_norm`` is the global 2-norm before the optimizer step (device operations only,
    read in the background); ``train/loss`` the step's loss (``outputs["loss"]`` summed over the
    accumulated batches, which Lightning divides by their number). A stop requested by an alert
    rule sets ``trainer.should_stop``. Validation and checkpointing are not counted in steps.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        logger: TrainmonLogger | None = None,
        monitor: Monitor | None = None,
    ) -> None:
        self._own = LazyMonitor(config, monitor)
        self._logger = logger
        self._lazy: LazyMonitor | None = logger.share() if logger is not None else None
        self._monitor: Monitor | None = None
        self._clock: PhaseClock | None = None
        self._samples = 0
        self._losses: list[Any] = []
        self._grad_norm: Any = None
        self._last_step = -1
        self._params: list[Any] = []

    @property
    def monitor(self) -> Monitor | None:
        """The monitor once fitting has started."""
        return self._monitor

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Share a :class:`TrainmonLogger`'s monitor if the trainer has one, else build one."""
        if stage != "fit":
            return
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TrainmonLogger)]
        logger = self._logger or (loggers[0] if loggers else None)
        self._lazy = logger.bind(trainer) if logger is not None else self._own
        monitor = self._monitor = self._lazy.get(all_ranks_log=True)
        breakdown = self._lazy.config.wall_clock_breakdown
        self._clock = PhaseClock(0, breakdown, cuda_device_of(pl_module))
        monitor.step = trainer.global_step
        self._last_step = trainer.global_step

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Close a monitor built here (a shared one closes in the logger's ``finalize``)."""
        if stage == "fit":
            self._own.close()
            self._monitor = None

    # ---- per batch (training thread) --------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._clock is not None:
            self._params = [p for p in pl_module.parameters() if p.requires_grad]
            self._clock.restart(DATA)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        clock = self._clock
        if clock is not None:
            clock.switch(FORWARD)
            self._samples += _extract_batch_size(batch)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._clock is not None:
            self._clock.switch(BACKWARD)

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._clock is not None:
            self._clock.switch(OTHER)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The gradients are complete: take their norm (a device tensor, no sync)."""
        if self._clock is None:
            return
        self._clock.switch(OPTIMIZER)
        grads = [p.grad for p in self._params if p.grad is not None]
        self._grad_norm = total_grad_norm(grads, len({(g.device, g.dtype) for g in grads}) <= 1)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        """At an optimizer step (``global_step`` moved): record the step at ``global_step``."""
        clock, monitor = self._clock, self._monitor
        if clock is None or monitor is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None and hasattr(loss, "detach"):
            self._losses.append(loss.detach())
        step = trainer.global_step
        if step == self._last_step:  # accumulating: the next batch's wait is data time
            clock.switch(DATA)
            return
        self._last_step = step
        items: list[Item] = clock.end(self._samples)
        self._samples = 0
        losses, self._losses = self._losses, []
        if losses:
            items.append(("train/loss", losses[0] if len(losses) == 1 else _sum(losses)))
        if self._grad_norm is not None:
            items.append(("train/grad_norm", self._grad_norm))
            self._grad_norm = None
        monitor.step = step
        monitor.write_events(items)
        if monitor.stop_reason is not None:
            trainer.should_stop = True

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Validation is not a training step: the next step counts from here."""
        if self._clock is not None:
            self._clock.restart(DATA)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        """Checkpointing is not a training step either."""
        if self._clock is not None:
            self._clock.restart(DATA)


def _sum(tensors: list[Any]) -> Any:
    import torch

    return torch.stack([t.reshape(()) for t in tensors]).sum()


__all__ = ["PACKAGE", "TrainmonCallback", "TrainmonLogger"]
