"""The Hugging Face ``Trainer`` driver: ``Trainer(..., callbacks=[TrainmonCallback(config)])``.

What the Trainer logs goes to trainmon's names at ``state.global_step``; each optimizer step
adds trainmon's own step time, throughput, breakdown and memory. Importing this module imports
transformers (``pip install "trainmon[transformers]"``); ``import trainmon`` does not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from trainmon.collect.instrument import StepInstrument
from trainmon.config import ConfigSource
from trainmon.core.entries import Item
from trainmon.extras import require
from trainmon.integrations.common import LazyMonitor, device_of
from trainmon.monitor import Monitor

_transformers = require("transformers", "transformers", "trainmon.integrations.transformers")
TrainerCallback: Any = _transformers.TrainerCallback

#: The Trainer's log keys that have a trainmon name of their own.
_RENAMED = {
    # log_history's loss: NaN/inf filtered (logging_nan_inf_filter) and averaged over the
    # logging interval; train/loss is the raw per-step loss read from the model's outputs
    "loss": "train/logged_loss",
    "learning_rate": "train/lr",
    "grad_norm": "train/grad_norm",
    "epoch": "train/epoch",
}
_PREFIXES = (("eval_", "eval/"), ("test_", "test/"), ("predict_", "predict/"))


def metric_name(key: str) -> str:
    """The trainmon name of a Trainer log key.

    ``loss``, ``learning_rate``, ``grad_norm``, ``epoch`` become ``train/logged_loss`` (the
    Trainer's filtered, interval-averaged loss; ``train/loss`` is the raw per-step one),
    ``train/lr``, ``train/grad_norm``, ``train/epoch``; ``eval_<x>`` becomes ``eval/<x>``
    (``test_``, ``predict_`` alike); any other key ``k`` becomes ``train/<k>``, as the Trainer's own
    TensorBoard callback names it (so the end-of-training ``train_loss`` average is
    ``train/train_loss`` and never overwrites the last step's ``train/loss``).
    """
    renamed = _RENAMED.get(key)
    if renamed is not None:
        return renamed
    for prefix, group in _PREFIXES:
        if key.startswith(prefix):
            return group + key[len(prefix) :]
    return "train/" + key


def log_items(logs: Mapping[str, Any], step: int) -> list[Item]:
    """``(trainmon name, value, step)`` for each number in a Trainer ``logs`` dict (text and
    other non-numbers, which the Trainer also logs, are left out)."""
    return [
        (metric_name(key), value, step)
        for key, value in logs.items()
        if type(value) in (float, int) or _is_scalar(value)
    ]


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (str, bytes, bool)) and hasattr(value, "__float__")


class TrainmonCallback(TrainerCallback):  # type: ignore[misc]
    """Drives a :class:`~trainmon.collect.instrument.StepInstrument` from the Trainer's hooks
    and sends the Trainer's logs to the same :class:`~trainmon.Monitor`.

    ``config`` is a trainmon/DeepSpeed-style config (dict, path or ``TrainmonConfig``); the
    monitor is built at ``on_train_begin`` (the process group exists by then) and closed at
    ``on_train_end`` on every rank. Pass ``monitor=`` to use one you own (left open).
    A stop requested by an alert rule sets ``control.should_training_stop``.

    Per optimizer step: ``perf/step_time_ms`` (from the previous step's end, or from the end of
    an evaluation or checkpoint since), ``perf/samples_per_sec`` (``per_device_train_batch_size
    × gradient_accumulation_steps`` over it; ``perf/job_samples_per_sec`` adds the ranks),
    ``mem/*`` and, with ``wall_clock_breakdown``, ``perf/data_ms`` (fetching the step's
    micro-batches), ``perf/forward_ms`` (the model's training forwards, from forward hooks),
    ``perf/backward_inner_ms`` (what follows each forward up to the optimizer: backward, DDP's
    gradient all-reduce, which the Trainer runs inside backward, and clipping) and
    ``perf/optimizer_ms`` (optimizer and scheduler step, zero_grad). The loss, learning rate
    and gradient norm are the Trainer's own (``logging_steps=1`` logs them every step).
    """

    def __init__(self, config: ConfigSource = None, *, monitor: Monitor | None = None) -> None:
        self._lazy = LazyMonitor(config, monitor)
        self._instrument: StepInstrument | None = None
        self._hooks: list[Any] = []
        self._monitor: Monitor | None = None
        # wall time of the last step end, evaluation or save: where the next evaluation or
        # save began (the Trainer has no hook before them), for their journal spans
        self._since: float | None = None
        # whether the model's outputs carried a loss (else the Trainer's is train/loss too)
        self._raw = [False]

    @property
    def monitor(self) -> Monitor | None:
        """The monitor once training has begun (None before ``on_train_begin``)."""
        return self._monitor

    # ---- lifecycle ----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Build the monitor and the step instrument; time the model's training forwards."""
        monitor = self._monitor = self._lazy.get(all_ranks_log=True)
        monitor.step = state.global_step
        model = kwargs.get("model")
        inst = self._instrument = StepInstrument(
            monitor,
            samples_per_step=args.per_device_train_batch_size * args.gradient_accumulation_steps,
            device=device_of(model),
        )
        inst.steps = state.global_step
        if model is not None and not self._hooks:
            self._hooks = _read_losses(model, inst, args.gradient_accumulation_steps, self._raw)
            if inst.breakdown:
                self._hooks += _time_forwards(model, inst)
        inst.restart()
        inst.data_begin()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Remove the forward hooks and close the monitor (every rank: a final gather)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        inst, self._instrument = self._instrument, None
        if inst is not None:
            inst.close()
        self._lazy.close()
        self._monitor = None

    # ---- per step (training thread) -------------------------------------------------------

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer fetched the step's micro-batches before this hook: data ends here."""
        if self._instrument is not None:
            self._instrument.data_end()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Backward, the gradient all-reduce and clipping are done: the optimizer starts."""
        inst = self._instrument
        if inst is not None:
            inst.backward_end()
            inst.optimizer_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Log the step at ``global_step``; the wait for the next batches starts."""
        inst = self._instrument
        if inst is None:
            return
        inst.optimizer_end()
        inst.step_end(state.global_step)
        inst.data_begin()
        self._since = time.time()
        if inst.monitor.stop_reason is not None:
            control.should_training_stop = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        """Everything the Trainer logs, renamed (:func:`metric_name`), at ``global_step``."""
        monitor = self._monitor
        if monitor is None or not logs:
            return
        items = log_items(logs, state.global_step)
        if not self._raw[0]:  # a custom compute_loss: no raw loss read, the Trainer's it is
            items += [("train/loss", v, s) for name, v, s in items if name == "train/logged_loss"]
        if items:
            monitor.write_events(items)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Evaluation is not a training step: the next step's time counts from here. Its
        span (from the step's end) goes to the journal as ``eval`` (``trainmon goodput``)."""
        if self._instrument is not None:
            self._instrument.restart()
        self._span("eval")
        if self._monitor is not None and self._monitor.stop_reason is not None:
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Checkpointing is not a training step either; its span (from the step's end or the
        evaluation before it) goes to the journal as ``checkpoint_save``."""
        if self._instrument is not None:
            self._instrument.restart()
        self._span("checkpoint_save")

    def _span(self, kind: str) -> None:
        now = time.time()
        if self._monitor is not None and self._since is not None:
            self._monitor.record_span(kind, self._since, now)
        self._since = now


def _read_losses(
    model: Any, inst: StepInstrument, accumulation: int, seen: list[bool]
) -> list[Any]:
    """A forward hook giving each training forward's loss (``outputs.loss``, detached, never
    read here) to the instrument, so ``train/loss`` is the raw per-step mean: a NaN shows as
    NaN, which the Trainer's ``logging_nan_inf_filter`` would hide. With
    ``num_items_in_batch`` the model's loss is a share of the step's: scaled back."""
    import torch

    grad_enabled = torch.is_grad_enabled
    tensor = torch.Tensor

    def after(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not (module.training and grad_enabled()):
            return
        loss = getattr(output, "loss", None)
        if loss is None and isinstance(output, Mapping):
            loss = output.get("loss")
        if not isinstance(loss, tensor) or loss.numel() != 1:
            return
        seen[0] = True
        loss = loss.detach()
        if kwargs.get("num_items_in_batch") is not None and accumulation > 1:
            loss = loss * accumulation  # the micro-batches' shares add up to the step's loss
        inst.record_loss(loss)

    return [model.register_forward_hook(after, with_kwargs=True)]


def _time_forwards(model: Any, inst: StepInstrument) -> list[Any]:
    """Forward hooks on ``model``: a training forward is ``forward``, what follows it up to the
    next forward or the optimizer is ``backward``. Forwards under ``torch.no_grad()`` or in
    eval mode (evaluation) are not counted."""
    import torch

    grad_enabled = torch.is_grad_enabled
    counting = [False]

    def before(module: Any, inputs: Any) -> None:
        if module.training and grad_enabled():
            counting[0] = True
            inst.backward_end()  # the previous micro-batch's backward, if one is open
            inst.forward_begin()

    def after(module: Any, inputs: Any, output: Any) -> None:
        if counting[0]:
            counting[0] = False
            inst.forward_end()
            inst.backward_begin()

    return [model.register_forward_pre_hook(before), model.register_forward_hook(after)]


__all__ = ["TrainmonCallback", "log_items", "metric_name"]
