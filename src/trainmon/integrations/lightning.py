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

import contextlib
import importlib
import sys
import time
from argparse import Namespace
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from trainmon.collect.instrument import StepInstrument, grad_norm
from trainmon.config import ConfigSource
from trainmon.errors import MissingExtraError
from trainmon.extras import is_installed
from trainmon.integrations.common import LazyMonitor, device_of, record_hparams
from trainmon.logging import get_logger
from trainmon.monitor import Monitor

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


def batch_size_of(batch: Any) -> int:
    """Lightning's ``extract_batch_size``, without its generic walk for the usual batches: a
    tensor, or a plain tuple, list or dict of tensors that agree on their first dimension (a 0-d
    tensor counts 1). Anything else, and any disagreement, goes to Lightning's function, so the
    result and the "ambiguous collection" warning are Lightning's own."""
    if isinstance(batch, Tensor):
        return batch.size(0) if batch.ndim else 1
    kind = type(batch)
    if kind is tuple or kind is list or kind is dict:
        size = -1
        for item in batch.values() if kind is dict else batch:
            if not isinstance(item, Tensor):
                return int(_extract_batch_size(batch))
            found = item.size(0) if item.ndim else 1
            if found != size:
                if size >= 0:
                    return int(_extract_batch_size(batch))
                size = found
        if size >= 0:
            return size
    return int(_extract_batch_size(batch))


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
        self._monitor: Monitor | None = None  # the experiment, once built: no lookup per step
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
            monitor = self._monitor
            if monitor is None:
                monitor = self._monitor = self.experiment
            monitor.log(values, step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        """Keep the hyper-parameters in :attr:`hyperparams` and record them with
        ``Monitor.log_hparams`` (journal, TensorBoard's HParams, W&B, MLflow)."""
        self.hyperparams.update(vars(params) if isinstance(params, Namespace) else dict(params))
        record_hparams(self.experiment, self.hyperparams)

    def save(self) -> None:
        """Nothing to do: the monitor's background thread flushes by itself."""

    def finalize(self, status: str) -> None:
        """Flush and close the monitor (every rank); ``status`` is "success" or "failed"."""
        if status != "success":
            _log.info("Lightning run ended with status %r", status)
        self._lazy.close(
            "success" if status == "success" else "failed" if status == "failed" else "aborted"
        )


class TrainmonCallback(_Callback):  # type: ignore[misc]
    """Drives a :class:`~trainmon.collect.instrument.StepInstrument` from Lightning's hooks.

    Per optimizer step, at ``trainer.global_step``: ``train/lr`` (the first parameter
    group's rate the step used), ``perf/step_time_ms``,
    ``perf/samples_per_sec`` (the samples of the step's batches, by Lightning's
    ``extract_batch_size``), ``train/grad_norm`` (global 2-norm before the optimizer step:
    device operations only, read in the background), ``train/loss`` (the step's loss from
    ``outputs["loss"]``), ``mem/*``; with ``wall_clock_breakdown``: ``perf/data_ms`` (previous
    batch end → batch start), ``perf/forward_ms`` (batch start → ``on_before_backward``: the
    ``training_step``), ``perf/backward_inner_ms`` (→ ``on_after_backward``; DDP's gradient
    all-reduce runs inside it), ``perf/optimizer_ms`` (``on_before_optimizer_step`` → batch
    end). Validation and checkpoints between steps are not counted in the next step; they go to
    the journal as spans (``trainmon goodput``'s eval_s, checkpoint_save_s and
    checkpoint_load_s): each validation loop (``on_validation_start`` → ``on_validation_end``),
    each ``trainer.save_checkpoint`` (what ``ModelCheckpoint`` calls: the state's collection
    and the write) and, when fitting resumes from ``ckpt_path``, the checkpoint's load in two
    spans (reading it and restoring the module and the callbacks; later, after the strategy's
    set-up, the loops, optimizers and schedulers), by wrapping those calls for the fit.

    Give ``logger=`` the :class:`TrainmonLogger` of the same trainer to share its monitor and
    gather statistics across ranks (a logger found in the trainer otherwise is still shared).
    A stop requested by an alert rule sets ``trainer.should_stop``.
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
        self._instrument: StepInstrument | None = None
        self._samples = 0
        self._accumulate = 1
        self._last_step = -1
        self._params: list[Any] = []
        self._same_kind = True
        self._validation_start: float | None = None
        self._lr: float | None = None
        self._wrapped: list[tuple[Any, str]] = []  # (object, method) timed during the fit
        self._load_start: float | None = None  # a resume's read began (the first span)
        self._resuming = False  # a resume's training state is still to be restored

    @property
    def monitor(self) -> Monitor | None:
        """The monitor once fitting has started."""
        lazy = self._lazy
        return lazy.built if lazy is not None and self._instrument is not None else None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Share a :class:`TrainmonLogger`'s monitor if the trainer has one, else build one."""
        if stage != "fit":
            return
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TrainmonLogger)]
        logger = self._logger or (loggers[0] if loggers else None)
        self._lazy = logger.bind(trainer) if logger is not None else self._own
        monitor = self._lazy.get(all_ranks_log=True)
        monitor.step = trainer.global_step
        self._instrument = StepInstrument(monitor, device=device_of(pl_module))
        self._instrument.steps = self._last_step = trainer.global_step
        self._time_checkpoints(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Close a monitor built here (a shared one closes in the logger's ``finalize``)."""
        if stage != "fit":
            return
        for owner, name in self._wrapped:
            with contextlib.suppress(AttributeError):
                delattr(owner, name)  # the class's method again
        self._wrapped = []
        inst, self._instrument = self._instrument, None
        if inst is not None:
            inst.close()
        self._own.close()

    # ---- per batch (training thread) --------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Note the parameters and the accumulation; the first batch's wait starts."""
        inst = self._instrument
        if inst is None:
            return
        self._params = [p for p in pl_module.parameters() if p.requires_grad]
        self._same_kind = len({(p.device, p.dtype) for p in self._params}) <= 1
        self._accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        inst.restart()
        inst.data_begin()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        inst = self._instrument
        if inst is not None:
            inst.data_end()
            inst.forward_begin()
            self._samples += batch_size_of(batch)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        inst = self._instrument
        if inst is not None:
            inst.forward_end()
            inst.backward_begin()

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._instrument is not None:
            self._instrument.backward_end()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The gradients are complete: take their norm (a device tensor, no sync) on the steps
        ``trainmon.grad_norm_every`` asks for."""
        inst = self._instrument
        if inst is None:
            return
        inst.optimizer_begin()
        # the rate this step uses: Lightning steps a per-step scheduler before on_train_batch_end
        groups = getattr(optimizer, "param_groups", None)
        self._lr = groups[0].get("lr") if groups else None
        if inst.grad_norm_due(int(trainer.global_step) + 1):  # trainmon.grad_norm_every
            grads = [p.grad for p in self._params if p.grad is not None]
            inst.record_grad_norm(grad_norm(grads, self._same_kind))  # combined in background

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        """At an optimizer step (``global_step`` moved): log the step at ``global_step``."""
        inst = self._instrument
        if inst is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None:
            if getattr(loss, "requires_grad", False):  # manual optimisation: the user's loss
                loss = loss.detach()
            # Lightning divides each batch's loss by the accumulation: undo it for the mean
            inst.record_loss(loss if self._accumulate == 1 else loss * self._accumulate)
        step = trainer.global_step
        if step != self._last_step:
            self._last_step = step
            inst.optimizer_end()
            inst.step_end(step, samples=self._samples, lr=self._lr)
            self._samples = 0
            if inst.monitor.stop_reason is not None:
                trainer.should_stop = True
        inst.data_begin()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        """Validation begins: its span goes to the journal as ``eval`` at its end."""
        self._validation_start = time.time()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Validation is not a training step: the next step counts from here. Its span goes
        to the journal as ``eval`` (``trainmon goodput``'s eval_s)."""
        inst = self._instrument
        if inst is not None:
            inst.restart()
            if self._validation_start is not None:
                inst.monitor.record_span("eval", self._validation_start, time.time())
        self._validation_start = None

    # ---- checkpoints (wrapped for the fit: Lightning has no hook after a save or load) ----

    def _time_checkpoints(self, trainer: Any) -> None:
        """Time ``trainer.save_checkpoint`` and the checkpoint connector's restore calls, set
        as instance attributes of the trainer and its connector and removed at teardown."""
        # Lightning's own (private) connector: its restore calls bound a resume's load
        connector = getattr(trainer, "_checkpoint_connector", None)
        wraps: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
            (trainer, "save_checkpoint", self._timed_save),
            (connector, "resume_start", self._timed_read),
            (connector, "restore_callbacks", self._timed_restore),
            (connector, "restore_training_state", self._timed_restore_training_state),
        ]
        for owner, name, wrap in wraps:
            original = getattr(owner, name, None)
            if callable(original) and name not in vars(owner):
                setattr(owner, name, wrap(original))
                self._wrapped.append((owner, name))

    def _timed_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            inst = self._instrument
            if inst is None:
                return original(*args, **kwargs)
            started = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                inst.monitor.record_span("checkpoint_save", started, time.time())
                inst.restart()  # the save is not part of the next step's time

        return save_checkpoint

    def _timed_read(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def resume_start(checkpoint_path: Any = None, *args: Any, **kwargs: Any) -> Any:
            if checkpoint_path:  # a resume: the read starts its first span
                self._load_start = time.time()
                self._resuming = True
            return original(checkpoint_path, *args, **kwargs)

        return resume_start

    def _timed_restore(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def restore_callbacks(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:  # read, module, datamodule and callbacks restored: the first span
                started, self._load_start = self._load_start, None
                if started is not None:
                    self._record_load(started)

        return restore_callbacks

    def _timed_restore_training_state(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def restore_training_state(*args: Any, **kwargs: Any) -> Any:
            started = time.time()
            try:
                return original(*args, **kwargs)
            finally:  # loops, optimizers and schedulers: the second span
                if self._resuming:
                    self._resuming = False
                    self._record_load(started)

        return restore_training_state

    def _record_load(self, started: float) -> None:
        inst = self._instrument
        if inst is not None:
            inst.monitor.record_span("checkpoint_load", started, time.time())


__all__ = ["PACKAGE", "TrainmonCallback", "TrainmonLogger", "batch_size_of"]
