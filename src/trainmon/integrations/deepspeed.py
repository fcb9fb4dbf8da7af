"""``trainmon.attach``: trainmon's monitoring beside a real ``deepspeed.initialize`` engine.

The driver wraps the engine's public ``forward``, ``backward``, ``step``,
``allreduce_gradients``, ``save_checkpoint`` and ``load_checkpoint`` (instance attributes, so
:func:`detach` restores the class's methods) and replaces ``engine.monitor`` with
:class:`DeepSpeedEvents`, which sends DeepSpeed's own ``(name, value, global_samples)`` events
through trainmon's background writers. DeepSpeed is imported only when a breakdown is taken
over, never by ``import trainmon``. Every measurement
is :class:`~trainmon.collect.instrument.StepInstrument`'s; the driver only calls its hooks.

What touches DeepSpeed's internals, on purpose and only here: with DeepSpeed's own
``wall_clock_breakdown`` on, ``engine._config.wall_clock_breakdown`` is set to false and
``engine.engine_timers`` replaced by timer lists without the breakdown timers, which turns off
DeepSpeed's synchronising timers and its per-step ``time (ms)`` prints; a ZeRO optimizer that
was handed the engine's timers gets DeepSpeed's ``NoopTimer`` instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainmon.collect.instrument import (
    BACKWARD,
    COMM,
    FORWARD,
    OPTIMIZER,
    StepInstrument,
    grad_norm,
)
from trainmon.config import TrainmonConfig, load_config
from trainmon.core.cross_rank import MONITORING_CALL
from trainmon.core.values import Deferred
from trainmon.errors import TrainmonError
from trainmon.integrations.checkpoint import load_monitor_state, save_monitor_state
from trainmon.logging import get_logger
from trainmon.monitor import Monitor

_log = get_logger("deepspeed")

#: The backends DeepSpeed's own events go to: the layouts DeepSpeed itself writes them in.
#: W&B and Comet keep trainmon's step axis (a second, samples-based axis would break W&B's
#: monotonic step), and the journal and console hold training steps only.
DEEPSPEED_EVENT_WRITERS = frozenset({"tensorboard", "csv"})

#: DeepSpeed's breakdown events (``_write_monitor``), written from trainmon's timers when the
#: config asks for DeepSpeed's ``wall_clock_breakdown``.
_DS_BREAKDOWN_PREFIX = "Train/Samples/elapsed_time_ms_"

_WRAPPED = (
    "forward",
    "backward",
    "step",
    "allreduce_gradients",
    "save_checkpoint",
    "load_checkpoint",
)
_attached: weakref.WeakKeyDictionary[Any, _DeepSpeedDriver] = weakref.WeakKeyDictionary()


class AttachError(TrainmonError, RuntimeError):
    """``attach`` was given something it cannot monitor; the message says what was expected."""


def attach(engine: Any, config: Mapping[str, Any] | None = None) -> Monitor:
    """Monitor a DeepSpeed engine (what ``deepspeed.initialize`` returned) with trainmon.

    ``config`` defaults to the config the engine was built with; a mapping given here is
    merged over it (section by section), so trainmon-only sections (``jsonl``, ``alerts``,
    ``trainmon``, ...) can be added without touching the DeepSpeed config. Returns the
    :class:`~trainmon.Monitor`; close it (or call :func:`detach`) at the end.
    """
    for name in (*_WRAPPED, "global_steps", "get_lr"):
        if not hasattr(engine, name):
            raise AttachError(
                f"attach(engine): {type(engine).__name__} has no {name!r}; expected the engine "
                f"returned by deepspeed.initialize"
            )
    if engine in _attached:
        raise AttachError("attach(engine): this engine is already attached; call detach first")
    if config is not None and not isinstance(config, Mapping):
        raise AttachError(
            f"attach(engine, config={config!r}): expected a mapping merged over the engine's "
            f"DeepSpeed config, or None"
        )
    merged = merge_configs(engine_config(engine), config or {})
    merged["train_batch_size"] = int(engine.train_batch_size())
    merged["train_micro_batch_size_per_gpu"] = int(engine.train_micro_batch_size_per_gpu())
    merged["gradient_accumulation_steps"] = int(engine.gradient_accumulation_steps())
    cfg = load_config(merged)
    driver = _DeepSpeedDriver(engine, cfg)
    _attached[engine] = driver
    return driver.monitor


def detach(engine: Any) -> None:
    """Undo :func:`attach`: restore the engine's methods and monitor, close trainmon's monitor."""
    driver = _attached.pop(engine, None)
    if driver is not None:
        driver.detach()


def engine_config(engine: Any) -> dict[str, Any]:
    """The DeepSpeed config the engine was built with, as a dict."""
    source = getattr(engine, "config", None)
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, (str, os.PathLike)) and Path(source).is_file():
        data = json.loads(Path(source).read_text())
        if isinstance(data, Mapping):
            return dict(data)
    params = getattr(getattr(engine, "_config", None), "_param_dict", None)
    return dict(params) if isinstance(params, Mapping) else {}


def merge_configs(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: mappings key by key (recursively), anything else replaced."""
    merged = dict(base)
    for key, value in over.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_configs(old, value)
        else:
            merged[key] = value
    return merged


class DeepSpeedEvents:
    """Stands in for DeepSpeed's ``engine.monitor``: ``write_events`` and ``enabled`` as before.

    ``write_events([(name, value, global_samples), ...])`` returns at once; the events go to
    trainmon's TensorBoard and CSV writers (DeepSpeed's layouts), on one rank only as in
    DeepSpeed (the logging rank, ``trainmon.log_rank``), and never into trainmon's step windows.
    ``(name, value)`` pairs (and a step of ``None``) are the seed's: they are logged like
    trainmon's own metrics, at the engine's current step (``global_steps``), on the logging rank.
    At a step where such a pair names a metric trainmon logs too (``train/loss``, ``train/lr``,
    ``train/grad_norm``, ``perf/...``), the step keeps one value, the pair's (the background
    merges a step's calls, the last value winning); said once per name. One tag holds one x
    axis: a stepped name that trainmon (or a pair) writes on its step axis goes to
    ``<name>@global_samples`` instead, with one warning per name.
    """

    tb_monitor = None
    wandb_monitor = None
    csv_monitor = None
    comet_monitor = None

    def __init__(self, monitor: Monitor, enabled: bool, rank: int) -> None:
        self._monitor = monitor
        self.enabled = enabled
        self._writes = rank == monitor.log_rank
        self._step_axis: set[str] = set()  # names the user wrote as pairs (trainmon's axis)
        self._moved: dict[str, str] = {}

    def write_events(self, event_list: Any) -> None:
        """Queue DeepSpeed-style ``(name, value, step)`` or ``(name, value)`` events (the
        logging rank only)."""
        if not self._writes:
            return
        items = event_list if type(event_list) is tuple else tuple(event_list)
        if all(
            type(item) is tuple
            and len(item) == 3
            and item[2] is not None
            and not _on_step_axis(item[0], self._step_axis)
            for item in items
        ):
            self._monitor.write_side_events(items, DEEPSPEED_EVENT_WRITERS)  # the fast path
            return
        paired: list[Any] = []
        stepped: list[Any] = []
        shared: list[str] = []  # names first written as pairs here that trainmon logs too
        for item in items:
            if isinstance(item, (tuple, list)) and (
                len(item) == 2 or (len(item) == 3 and item[2] is None)
            ):
                name = item[0]
                if isinstance(name, str) and name not in self._step_axis:
                    self._step_axis.add(name)
                    if _trainmon_step_name(name):
                        shared.append(name)
                paired.append(item)
            elif isinstance(item, (tuple, list)) and len(item) == 3:
                stepped.append((self._samples_name(item[0]), item[1], item[2]))
            else:
                raise TypeError(
                    f"engine.monitor.write_events: event {item!r} is not (name, value) or "
                    f"(name, value, step)"
                )
        if shared:
            _log.info(
                "engine.monitor.write_events: trainmon logs %s too, at global_steps; at a step "
                "where you log it, your value is kept and trainmon's dropped (one value a step "
                "in every writer)",
                ", ".join(map(repr, shared)),
            )
        if paired:  # trainmon's step axis: one record with the step's own values
            self._monitor.write_events(paired)
        if stepped:
            self._monitor.write_side_events(stepped, DEEPSPEED_EVENT_WRITERS)

    def _samples_name(self, name: Any) -> Any:
        """The tag of a samples-axis event: ``name``, or ``name@global_samples`` when trainmon
        (or a pair) writes ``name`` on the step axis; warns once per moved name."""
        if not isinstance(name, str) or not _on_step_axis(name, self._step_axis):
            return name
        moved = self._moved.get(name)
        if moved is None:
            moved = self._moved[name] = f"{name}@global_samples"
            _log.warning(
                "engine.monitor.write_events: %r is written by trainmon on its step axis "
                "(global_steps); your values on the samples axis (global_samples) go to %r so "
                "that each tag holds one x axis",
                name,
                moved,
            )
        return moved


#: The names trainmon's DeepSpeed driver writes on its step axis (``global_steps``).
_TRAINMON_STEP_NAMES = frozenset({"train/loss", "train/lr", "train/grad_norm", "train/loss_scale"})


def _trainmon_step_name(name: str) -> bool:
    """Whether trainmon itself logs ``name`` on its step axis."""
    return name in _TRAINMON_STEP_NAMES or name.startswith(("perf/", "sys/", "mem/"))


def _on_step_axis(name: Any, user_pairs: set[str]) -> bool:
    """Whether ``name`` is written on trainmon's step axis (by trainmon or as a user's pair)."""
    return isinstance(name, str) and (_trainmon_step_name(name) or name in user_pairs)


class _Sum(Deferred):
    """A sum of signed terms, some of which may be Deferred (device timings)."""

    __slots__ = ("terms",)

    def __init__(self, terms: list[tuple[float, Any]]) -> None:
        self.terms = terms

    def resolve(self) -> float:
        total = 0.0
        for sign, term in self.terms:
            value = term.resolve() if isinstance(term, Deferred) else term
            total += sign * float(value if value is not None else math.nan)
        return total


def _combine(terms: list[tuple[float, Any]]) -> Any:
    """The sum as a float when every term is a number, else a :class:`_Sum`."""
    if any(isinstance(term, Deferred) for _, term in terms):
        return _Sum(terms)
    return sum(sign * term for sign, term in terms)


class _DataParallelMean(Deferred):
    """The mean loss over the data-parallel ranks: an async all-reduce waited for here.

    The training thread only issues ``all_reduce(async_op=True)`` on one element; the wait
    and the read happen on the monitor's background thread.
    """

    __slots__ = ("ranks", "tensor", "work")

    def __init__(self, tensor: Any, work: Any, ranks: int) -> None:
        self.tensor = tensor
        self.work = work
        self.ranks = ranks

    def resolve(self) -> float:
        self.work.wait()
        return float(self.tensor.item()) / self.ranks


class _DeepSpeedDriver:
    """Translates a DeepSpeed engine's calls into hook calls on one :class:`StepInstrument`."""

    def __init__(self, engine: Any, config: TrainmonConfig) -> None:
        import torch
        import torch.distributed as dist

        self.engine = engine
        self.config = config
        # first, so that trainmon's TensorBoard file (perhaps of the same name: TensorBoard's
        # naming, same second and process) never shares the folder with an open writer
        self._ds_monitor = engine.monitor
        self._release_deepspeed_writers(self._ds_monitor)
        self.monitor = Monitor(config, all_ranks_log=True)
        self._torch = torch
        self._is_grad_enabled = torch.is_grad_enabled
        try:
            self._set_up(engine, config, dist)
        except BaseException:
            self.monitor.close()
            raise

    def _set_up(self, engine: Any, config: TrainmonConfig, dist: Any) -> None:
        self._dist_on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self._dist_on else 0
        self._dp = int(getattr(engine, "dp_world_size", 1) or 1)
        self._dp_group = getattr(engine, "data_parallel_group", None)
        device = getattr(engine, "device", None) or "cpu"
        self.device = (
            device if isinstance(device, self._torch.device) else self._torch.device(device)
        )
        # DeepSpeed's breakdown: trainmon's timers instead of DeepSpeed's synchronising ones
        self._ds_breakdown = bool(engine.wall_clock_breakdown())
        if self._ds_breakdown:
            self._take_over_breakdown(engine)
        samples = int(engine.train_micro_batch_size_per_gpu()) * int(
            engine.gradient_accumulation_steps()
        )
        self.instrument = StepInstrument(
            self.monitor,
            samples_per_step=samples,
            device=self.device,
            breakdown=config.wall_clock_breakdown or self._ds_breakdown,
            data_wait=False,  # DeepSpeed's loader is not seen: no wait is known to be data's
            between_steps=True,
        )
        self._fp16 = bool(engine.fp16_enabled())
        # ZeRO 0 in fp32: DeepSpeed keeps no norm (get_global_grad_norm() is None). With
        # gradient_clipping its clip_fp32_gradients computes one and drops it: kept from there;
        # without clipping the norm is computed here, before the step (on the steps
        # trainmon.grad_norm_every asks for)
        fp32_stage0 = (
            int(engine.zero_optimization_stage()) == 0
            and not self._fp16
            and not bool(engine.bfloat16_enabled())
        )
        self._clip_norm = fp32_stage0 and float(engine.gradient_clipping()) > 0.0
        self._own_norm = fp32_stage0 and not self._clip_norm
        self._params = [p for p in engine.module.parameters() if p.requires_grad]
        self._uniform = len({(p.device, p.dtype) for p in self._params}) <= 1
        # DeepSpeed's events through trainmon, when DeepSpeed's config turns its monitor on (as
        # DeepSpeed does): a monitor on makes DeepSpeed build its Train/Samples events on the
        # training thread every step (~30k instructions), duplicates of trainmon's train/* tags
        events_on = bool(getattr(self._ds_monitor, "enabled", False))
        self.events = DeepSpeedEvents(self.monitor, events_on, self.rank)
        engine.monitor = self.events
        self._originals = {
            name: getattr(engine, name) for name in _WRAPPED if hasattr(engine, name)
        }
        engine.forward = self.forward
        engine.backward = self.backward
        engine.step = self.step
        engine.allreduce_gradients = self.allreduce_gradients
        if self._clip_norm:
            from deepspeed.runtime.utils import clip_grad_norm_  # imported once: not per step

            self._clip_grad_norm = clip_grad_norm_
            engine.clip_fp32_gradients = self.clip_fp32_gradients
        engine.save_checkpoint = self.save_checkpoint
        engine.load_checkpoint = self.load_checkpoint

    # ---- set-up helpers ---------------------------------------------------------------------

    @staticmethod
    def _take_over_breakdown(engine: Any) -> None:
        """DeepSpeed's breakdown timers synchronise the device and print every step: off."""
        from deepspeed.runtime.engine import EngineTimers
        from deepspeed.utils.timer import NoopTimer

        engine._config.wall_clock_breakdown = False
        engine.engine_timers = EngineTimers(
            enable_micro_timers=False, enable_global_timers=bool(engine.flops_profiler_enabled())
        )
        optimizer: Any = getattr(engine, "optimizer", None)
        if optimizer is not None and getattr(optimizer, "timers", None) is engine.timers:
            optimizer.timers = NoopTimer()  # ZeRO's optimizer_* timers were the engine's

    @staticmethod
    def _release_deepspeed_writers(ds_monitor: Any) -> None:
        """Close the TensorBoard file DeepSpeed opened in ``initialize`` (trainmon writes now)."""
        tb = getattr(ds_monitor, "tb_monitor", None)
        writer = getattr(tb, "summary_writer", None)
        if writer is not None:
            try:
                writer.close()
            except Exception:
                _log.warning("could not close DeepSpeed's TensorBoard writer", exc_info=True)

    # ---- the wrapped engine methods (the hot path) ------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """DeepSpeed's forward, timed when gradients are on (evaluation passes untimed)."""
        original = self._originals["forward"]
        if not self._is_grad_enabled():
            return original(*args, **kwargs)
        instrument = self.instrument
        # the gap since the last step(): user code or a loader trainmon does not see
        instrument.between_end()
        instrument.forward_begin()
        try:
            return original(*args, **kwargs)
        finally:
            instrument.forward_end()

    def backward(self, loss: Any, *args: Any, **kwargs: Any) -> Any:
        """DeepSpeed's backward; the micro-batch's loss is kept (detached) for ``train/loss``."""
        instrument = self.instrument
        if isinstance(loss, self._torch.Tensor):  # detached: see TrainmonEngine.backward
            instrument.record_loss(loss.detach())
        instrument.backward_begin()
        try:
            return self._originals["backward"](loss, *args, **kwargs)
        finally:
            instrument.backward_end()

    def allreduce_gradients(self, *args: Any, **kwargs: Any) -> Any:
        """DeepSpeed's gradient reduction (inside backward): the ``comm`` phase."""
        instrument = self.instrument
        instrument.comm_begin()
        try:
            return self._originals["allreduce_gradients"](*args, **kwargs)
        finally:
            instrument.comm_end()

    def clip_fp32_gradients(self) -> None:
        """DeepSpeed's clipping at ZeRO 0 in fp32 (its own call), keeping the norm it computes
        (before clipping) for ``train/grad_norm`` instead of computing it a second time."""
        engine = self.engine
        norm = self._clip_grad_norm(
            parameters=engine.module.parameters(),
            max_norm=engine.gradient_clipping(),
            mpu=engine.mpu,
        )
        instrument = self.instrument
        if instrument.grad_norm_due(int(engine.global_steps) + 1):  # the step being taken
            instrument.record_grad_norm(norm)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        """DeepSpeed's step; at an accumulation boundary, the step's metrics are logged."""
        engine = self.engine
        instrument = self.instrument
        boundary = bool(engine.is_gradient_accumulation_boundary())
        instrument.optimizer_begin()
        try:
            if (
                boundary
                and self._own_norm
                and instrument.grad_norm_due(int(engine.global_steps) + 1)  # this step's
            ):
                grads = [p.grad for p in self._params if p.grad is not None]
                if grads:
                    instrument.record_grad_norm(grad_norm(grads, self._uniform))
            result = self._originals["step"](*args, **kwargs)
        finally:
            instrument.optimizer_end()
        if boundary:
            self._log_step()
            self.monitor.step_end(engine, int(engine.global_steps))
        instrument.between_begin()
        return result

    def _log_step(self) -> None:
        engine = self.engine
        instrument = self.instrument
        if not self._own_norm and not self._clip_norm:
            norm = engine.get_global_grad_norm()
            if norm is not None:
                if instrument.grad_norm_due(int(engine.global_steps)):
                    instrument.record_grad_norm(norm)
            elif int(engine.global_steps) <= 1:
                self._own_norm = True  # this optimizer keeps no norm: compute it from now on
        if self._dp > 1 and self._dist_on:
            self._average_loss_over_ranks()
        step = int(engine.global_steps)
        loss_scale = _loss_scale(engine.optimizer) if self._fp16 else None
        instrument.step_end(step, lr=engine.get_lr()[0], loss_scale=loss_scale)
        if self._ds_breakdown and self.events.enabled:
            self._write_deepspeed_breakdown(int(engine.global_samples))

    def _average_loss_over_ranks(self) -> None:
        """train/loss over the data-parallel ranks: one async all-reduce of one element."""
        instrument = self.instrument
        local = instrument.local_loss()
        if local is None:
            return
        import torch.distributed as dist

        reduced = local.detach().float().clone()
        MONITORING_CALL.active = True
        try:
            work = dist.all_reduce(reduced, group=self._dp_group, async_op=True)
        finally:
            MONITORING_CALL.active = False
        instrument.replace_loss(_DataParallelMean(reduced, work, self._dp))

    def _write_deepspeed_breakdown(self, samples: int) -> None:
        """DeepSpeed's ``Train/Samples/elapsed_time_ms_*`` events, from trainmon's phases."""
        ms = self.instrument.last_phase_ms
        if ms is None:
            return
        backward = _combine([(1.0, ms[BACKWARD]), (1.0, ms[COMM])])
        self.events.write_events(
            [
                (_DS_BREAKDOWN_PREFIX + "forward", ms[FORWARD], samples),
                (_DS_BREAKDOWN_PREFIX + "backward", backward, samples),
                (_DS_BREAKDOWN_PREFIX + "backward_inner", ms[BACKWARD], samples),
                (_DS_BREAKDOWN_PREFIX + "backward_allreduce", ms[COMM], samples),
                (_DS_BREAKDOWN_PREFIX + "step", ms[OPTIMIZER], samples),
            ]
        )

    # ---- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(
        self, save_dir: str, tag: Any = None, client_state: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        """DeepSpeed's save, after draining trainmon (raises ``TrainingStopped`` if a stop rule
        fired, on every rank); trainmon's state goes beside it in the tag folder. Timed into
        the journal (``trainmon goodput``'s checkpoint_save_s)."""
        with self.monitor.span("checkpoint_save"):
            self.monitor.checkpoint_barrier(all_ranks=self._dist_on)
            if tag is None:
                tag = f"global_step{int(self.engine.global_steps)}"  # DeepSpeed's default tag
            save_monitor_state(self.monitor, Path(save_dir) / str(tag))
            client = {} if client_state is None else client_state
            try:
                return self._originals["save_checkpoint"](save_dir, tag, client, *args, **kwargs)
            finally:
                self.instrument.restart()  # the save is not part of the next step's time

    def load_checkpoint(self, load_dir: str, *args: Any, **kwargs: Any) -> Any:
        """DeepSpeed's load; then trainmon continues from the state saved beside it. Timed
        into the journal (``trainmon goodput``'s checkpoint_load_s)."""
        with self.monitor.span("checkpoint_load"):
            result = self._originals["load_checkpoint"](load_dir, *args, **kwargs)
            load_path = result[0] if isinstance(result, tuple) and result else None
            if load_path is not None:
                load_monitor_state(
                    self.monitor, Path(load_path).parent, step=int(self.engine.global_steps)
                )
                self.instrument.restart()
        return result

    # ---- lifecycle --------------------------------------------------------------------------

    def detach(self) -> None:
        """Restore the engine's methods and DeepSpeed's monitor; close trainmon's monitor."""
        engine = self.engine
        for name in (*self._originals, "clip_fp32_gradients"):
            with contextlib.suppress(AttributeError):
                delattr(engine, name)
        engine.monitor = self._ds_monitor
        self.instrument.close()
        self.monitor.close()


def _loss_scale(optimizer: Any) -> Any:
    """DeepSpeed's current fp16 loss scale (where DeepSpeed itself reads it)."""
    config = getattr(optimizer, "loss_scale_config", None)
    scale: Callable[[], Any] | Any = getattr(config, "cur_scale", None)
    if scale is None:
        scale = getattr(optimizer, "cur_scale", None)
    return scale
