"""The Hugging Face ``Trainer`` driver: ``Trainer(..., callbacks=[TrainmonCallback(config)])``.

What the Trainer logs goes to trainmon's names at ``state.global_step``; each optimizer step
adds trainmon's own step time, throughput, breakdown and memory. Importing this module imports
transformers (``pip install "trainmon[transformers]"``); ``import trainmon`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmon.config import ConfigSource
from trainmon.extras import require
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
from trainmon.monitor import Monitor
from trainmon.pipeline import Item

_transformers = require("transformers", "transformers", "trainmon.integrations.transformers")
TrainerCallback: Any = _transformers.TrainerCallback

#: The Trainer's log keys that have a trainmon name of their own.
_RENAMED = {
    "loss": "train/loss",
    "learning_rate": "train/lr",
    "grad_norm": "train/grad_norm",
    "epoch": "train/epoch",
}
_PREFIXES = (("eval_", "eval/"), ("test_", "test/"), ("predict_", "predict/"))


def metric_name(key: str) -> str:
    """The trainmon name of a Trainer log key.

    ``loss``, ``learning_rate``, ``grad_norm``, ``epoch`` become ``train/loss``, ``train/lr``,
    ``train/grad_norm``, ``train/epoch``; ``eval_<x>`` becomes ``eval/<x>`` (``test_``,
    ``predict_`` alike); any other key ``k`` becomes ``train/<k>``, as the Trainer's own
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
    """Sends the Trainer's logs and trainmon's per-step signals to a :class:`~trainmon.Monitor`.

    ``config`` is a trainmon/DeepSpeed-style config (dict, path or ``TrainmonConfig``); the
    monitor is built at ``on_train_begin`` (the process group exists by then) and closed at
    ``on_train_end`` on every rank. Pass ``monitor=`` to use one you own (left open).
    A stop requested by an alert rule sets ``control.should_training_stop``.
    """

    def __init__(self, config: ConfigSource = None, *, monitor: Monitor | None = None) -> None:
        self._lazy = LazyMonitor(config, monitor)
        self._clock: PhaseClock | None = None
        self._hooks: list[Any] = []
        self._monitor: Monitor | None = None

    @property
    def monitor(self) -> Monitor | None:
        """The monitor once training has begun (None before ``on_train_begin``)."""
        return self._monitor

    # ---- lifecycle ----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Build the monitor and the step clock; time the model's training forwards."""
        monitor = self._monitor = self._lazy.get(all_ranks_log=True)
        monitor.step = state.global_step
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        model = kwargs.get("model")
        breakdown = self._lazy.config.wall_clock_breakdown
        self._clock = PhaseClock(samples, breakdown, cuda_device_of(model))
        if breakdown and model is not None and not self._hooks:
            self._hooks = _time_forwards(model, self._clock)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Remove the forward hooks and close the monitor (every rank: a final gather)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._lazy.close()
        self._monitor = None

    # ---- per step (training thread) -------------------------------------------------------

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The first batch of an epoch is fetched from now: count it as the step's data wait."""
        if self._clock is not None:
            self._clock.restart(DATA)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer fetched the step's micro-batches before this hook: data ends here."""
        if self._clock is not None:
            self._clock.switch(OTHER)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Backward, the gradient all-reduce and clipping are done: the optimizer starts."""
        if self._clock is not None:
            self._clock.switch(OPTIMIZER)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the step's time, throughput, breakdown and memory at ``global_step``."""
        clock, monitor = self._clock, self._monitor
        if clock is None or monitor is None:
            return
        monitor.step = state.global_step
        monitor.write_events(clock.end())
        if monitor.stop_reason is not None:
            control.should_training_stop = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        """Everything the Trainer logs, renamed (:func:`metric_name`), at ``global_step``."""
        monitor = self._monitor
        if monitor is None or not logs:
            return
        items = log_items(logs, state.global_step)
        if items:
            monitor.write_events(items)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Evaluation is not a training step: the next step's time counts from here."""
        if self._clock is not None:
            self._clock.restart(DATA)
        if self._monitor is not None and self._monitor.stop_reason is not None:
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Checkpointing is not a training step either."""
        if self._clock is not None:
            self._clock.restart(DATA)


def _time_forwards(model: Any, clock: PhaseClock) -> list[Any]:
    """Forward hooks on ``model``: a training forward is FORWARD, what follows it BACKWARD.

    Forwards under ``torch.no_grad()`` or in eval mode (evaluation) are not counted.
    """
    import torch

    grad_enabled = torch.is_grad_enabled
    counting = [False]

    def before(module: Any, inputs: Any) -> None:
        if module.training and grad_enabled():
            counting[0] = True
            clock.switch(FORWARD)

    def after(module: Any, inputs: Any, output: Any) -> None:
        if counting[0]:
            counting[0] = False
            clock.switch(BACKWARD)

    return [model.register_forward_pre_hook(before), model.register_forward_hook(after)]


__all__ = ["TrainmonCallback", "log_items", "metric_name"]
