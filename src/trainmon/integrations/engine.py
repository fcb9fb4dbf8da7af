"""``trainmon.initialize``: DeepSpeed's engine API for a plain PyTorch model, monitored by itself.

A thin driver: what is measured per step lives in
:class:`~trainmon.collect.instrument.StepInstrument`; the engine only calls its hooks around
forward, backward, the gradient all-reduce and the optimizer step, and keeps DeepSpeed's
bookkeeping (micro-batches, accumulation boundaries, fp16 loss scaling, checkpoints). The
metrics it logs and how it differs from DeepSpeed are in the README ("Quick start: the
seed's loop").
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from trainmon.collect.instrument import StepInstrument
from trainmon.collect.instrument.gradnorm import grad_norm, norm_value
from trainmon.config import ConfigSource, TrainmonConfig, load_config
from trainmon.core.place import discover
from trainmon.core.writer import RunStatus
from trainmon.errors import ConfigError, TrainmonError, did_you_mean
from trainmon.extras import require
from trainmon.integrations import checkpoint
from trainmon.logging import get_logger
from trainmon.monitor import Monitor, run_status

if TYPE_CHECKING:
    import torch

_log = get_logger("engine")

# Keyword arguments of ``deepspeed.initialize`` that trainmon accepts and does not need.
_DEEPSPEED_KWARGS = frozenset(
    {"args", "distributed_port", "mpu", "dist_init_required", "mesh_param", "config_params"}
)
_OPTIMIZER_TYPES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
_SCHEDULER_TYPES = {"warmuplr": "WarmupLR", "warmupdecaylr": "WarmupDecayLR"}


class EngineUsageError(TrainmonError, RuntimeError):
    """The engine was called in an order or with a value it cannot use; the message says the fix."""


# ---- batch arithmetic ------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSizes:
    """DeepSpeed's three batch numbers, consistent: ``train = micro * gas * world_size``."""

    train_batch_size: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    world_size: int


def resolve_batch_sizes(
    train: int | None, micro: int | None, gas: int | None, world_size: int
) -> BatchSizes:
    """Fill in the missing batch numbers with DeepSpeed's rules, or raise showing the arithmetic.

    Any two give the third; ``train_batch_size`` alone means one accumulation step; the micro
    batch alone means one accumulation step; with neither batch size given the micro batch is 1
    (``gradient_accumulation_steps`` alone keeps its value).
    """
    w = world_size
    if train is None:
        micro = 1 if micro is None else micro
        gas = 1 if gas is None else gas
        return BatchSizes(micro * gas * w, micro, gas, w)
    if micro is not None and gas is not None:
        if train != micro * gas * w:
            raise ConfigError(
                f"train_batch_size {train} != train_micro_batch_size_per_gpu {micro} * "
                f"gradient_accumulation_steps {gas} * world_size {w} = {micro * gas * w}; "
                f"change one of them so that the product matches, or leave one out and "
                f"trainmon derives it"
            )
        return BatchSizes(train, micro, gas, w)
    if micro is not None:
        _check_divides(
            train,
            micro * w,
            f"train_micro_batch_size_per_gpu {micro}",
            w,
            "gradient_accumulation_steps",
        )
        return BatchSizes(train, micro, train // (micro * w), w)
    gas = 1 if gas is None else gas
    what = f"gradient_accumulation_steps {gas}"
    _check_divides(train, gas * w, what, w, "train_micro_batch_size_per_gpu")
    return BatchSizes(train, train // (gas * w), gas, w)


def _check_divides(train: int, divisor: int, what: str, w: int, derived: str) -> None:
    if train % divisor == 0 and train >= divisor:
        return
    raise ConfigError(
        f"train_batch_size {train} is not a multiple of {what} * world_size {w} = {divisor} "
        f"({train} / {divisor} = {train / divisor:.4g}), so {derived} cannot be derived; "
        f"make train_batch_size a multiple of {divisor} or give all three batch numbers"
    )


# ---- optimizer, scheduler and precision from the DeepSpeed config ----------------------------


def build_optimizer(section: Any, params: Any) -> torch.optim.Optimizer:
    """A torch optimizer from DeepSpeed's ``"optimizer": {"type": ..., "params": {...}}``.

    As in DeepSpeed, ``"Adam"`` means decoupled weight decay (``torch.optim.AdamW``, weight decay
    0 unless given) unless ``"adam_w_mode": false``; ``torch_adam`` is accepted and ignored.
    """
    import torch

    if not isinstance(section, Mapping):
        raise ConfigError(
            f"'optimizer' = {section!r}: expected a mapping such as "
            f'{{"type": "AdamW", "params": {{"lr": 0.001}}}}'
        )
    kind = section.get("type")
    valid = ", ".join(_OPTIMIZER_TYPES.values())
    if not isinstance(kind, str) or kind.lower() not in _OPTIMIZER_TYPES:
        extra = did_you_mean(str(kind), list(_OPTIMIZER_TYPES.values()), start="; ")
        raise ConfigError(
            f"'optimizer.type' = {kind!r}: expected one of {valid} (any case){extra}, "
            f"or pass optimizer= to trainmon.initialize"
        )
    given = section.get("params", {})
    if not isinstance(given, Mapping):
        raise ConfigError(f"'optimizer.params' = {given!r}: expected a mapping of arguments")
    kwargs = dict(given)
    name = _OPTIMIZER_TYPES[kind.lower()]
    if name == "Adam":
        kwargs.pop("torch_adam", None)
        if kwargs.pop("adam_w_mode", True):
            name = "AdamW"
            kwargs.setdefault("weight_decay", 0.0)
    try:
        optimizer: torch.optim.Optimizer = getattr(torch.optim, name)(params, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"'optimizer.params' = {dict(given)!r}: torch.optim.{name} rejected them: {exc}"
        ) from exc
    return optimizer


def build_scheduler(section: Any, optimizer: torch.optim.Optimizer) -> Any:
    """DeepSpeed's ``WarmupLR`` / ``WarmupDecayLR`` as a ``LambdaLR`` with the same learning rates.

    The learning rate goes from ``warmup_min_lr`` to ``warmup_max_lr`` over ``warmup_num_steps``
    (``warmup_type`` "log" or "linear"), then stays (WarmupLR) or falls linearly back to
    ``warmup_min_lr`` at ``total_num_steps`` (WarmupDecayLR). Other types: pass lr_scheduler=.
    """
    import torch

    if not isinstance(section, Mapping):
        raise ConfigError(f"'scheduler' = {section!r}: expected a mapping with 'type' and 'params'")
    kind = section.get("type")
    if not isinstance(kind, str) or kind.lower() not in _SCHEDULER_TYPES:
        raise ConfigError(
            f"'scheduler.type' = {kind!r}: trainmon builds {', '.join(_SCHEDULER_TYPES.values())}; "
            f"for any other schedule pass lr_scheduler= (a scheduler or a function of the "
            f"optimizer) to trainmon.initialize"
        )
    decay = _SCHEDULER_TYPES[kind.lower()] == "WarmupDecayLR"
    given = dict(section.get("params", {}) or {})
    known = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"}
    known |= {"total_num_steps"} if decay else set()
    unknown = sorted(set(given) - known - {"last_batch_iteration"})
    if unknown:
        raise ConfigError(
            f"'scheduler.params' has unknown key(s) {unknown}; valid keys: {sorted(known)}"
        )
    low = float(given.get("warmup_min_lr", 0.0))
    high = float(given.get("warmup_max_lr", 0.001))
    warmup = int(given.get("warmup_num_steps", 1000))
    log_warmup = given.get("warmup_type", "log") == "log"
    if given.get("warmup_type", "log") not in ("log", "linear"):
        raise ConfigError(
            f"'scheduler.params.warmup_type' = {given['warmup_type']!r}: expected 'log' or 'linear'"
        )
    if decay and "total_num_steps" not in given:
        raise ConfigError("'scheduler.params.total_num_steps' is required for WarmupDecayLR")
    total = int(given.get("total_num_steps", 0))

    def learning_rate(step: int) -> float:
        if step < warmup:
            gamma = math.log(step + 1) / math.log(max(warmup, 2)) if log_warmup else step / warmup
        elif decay:
            gamma = max(0.0, (total - step) / max(1.0, total - warmup))
        else:
            gamma = 1.0
        return low + (high - low) * gamma

    for group in optimizer.param_groups:
        group["lr"] = 1.0  # LambdaLR multiplies the base rate: 1.0 makes the lambda absolute
        group.pop("initial_lr", None)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate)


@dataclass(frozen=True)
class Precision:
    """Mixed precision read from DeepSpeed's ``fp16`` / ``bf16`` sections."""

    autocast_dtype: Any = None  # torch.float16 / torch.bfloat16, or None for full precision
    init_scale: float = 2.0**16
    static_scale: float | None = None  # DeepSpeed's fp16.loss_scale > 0: a fixed scale
    growth_interval: int = 1000


def read_precision(raw: Mapping[str, Any]) -> Precision:
    """fp16 → autocast(float16) with a GradScaler (``initial_scale_power``, ``loss_scale``,
    ``loss_scale_window`` as in DeepSpeed; other fp16 keys are ignored); bf16 → autocast only."""
    import torch

    fp16 = _section(raw, "fp16")
    bf16 = _section(raw, "bf16") or _section(raw, "bfloat16")
    fp16_on = bool(fp16.get("enabled", False))
    bf16_on = bool(bf16.get("enabled", False))
    if fp16_on and bf16_on:
        raise ConfigError("'fp16.enabled' and 'bf16.enabled' are both true: enable at most one")
    if bf16_on:
        return Precision(autocast_dtype=torch.bfloat16)
    if not fp16_on:
        return Precision()
    power = fp16.get("initial_scale_power", 16)
    scale = fp16.get("loss_scale", 0)
    window = fp16.get("loss_scale_window", 1000)
    for key, value in (("initial_scale_power", power), ("loss_scale", scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"'fp16.{key}' = {value!r}: expected a number >= 0")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(f"'fp16.loss_scale_window' = {window!r}: expected an integer >= 1")
    static = float(scale) if scale > 0 else None
    return Precision(
        autocast_dtype=torch.float16,
        init_scale=static if static is not None else 2.0**power,
        static_scale=static,
        growth_interval=window,
    )


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key!r} = {value!r}: expected a mapping such as {{'enabled': true}}")
    return value


# ---- the engine -------------------------------------------------------------------------------


class TrainmonEngine:
    """Wraps a model and its optimizer like DeepSpeed's engine and logs each step by itself.

    ``engine(batch)`` runs the module, ``backward(loss)`` and ``step()`` do DeepSpeed's
    accumulation, clipping and precision handling; every optimizer step enqueues the step's
    metrics to :attr:`monitor` at step :attr:`global_steps`. Unknown attributes are looked up on
    the wrapped :attr:`module`.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        config: TrainmonConfig,
        batch: BatchSizes,
        lr_scheduler: Any = None,
        monitor: Monitor | None = None,
        training_data: Any = None,
        collate_fn: Callable[..., Any] | None = None,
    ) -> None:
        self.module = module
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.config = config
        self._owns_monitor = monitor is None
        self.monitor = Monitor(config, all_ranks_log=True) if monitor is None else monitor
        try:
            self._set_up(module, config, batch, training_data, collate_fn)
        except BaseException:
            if self._owns_monitor:
                self.monitor.close()
            raise

    def _set_up(
        self,
        module: torch.nn.Module,
        config: TrainmonConfig,
        batch: BatchSizes,
        training_data: Any,
        collate_fn: Callable[..., Any] | None,
    ) -> None:
        import torch

        self.global_steps = 0
        self.global_samples = 0
        self.micro_steps = 0
        self._batch = batch
        self._gas = batch.gradient_accumulation_steps
        self._closed = False
        first = next(iter(module.parameters()), None)
        self.device: torch.device = first.device if first is not None else torch.device("cpu")
        self._is_grad_enabled = torch.is_grad_enabled
        self._tensor_type = torch.Tensor
        self._clip_grad_norm = torch.nn.utils.clip_grad_norm_
        self._clip = config.gradient_clipping

        # precision
        precision = read_precision(config.raw)
        self._autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
        self._scaler: Any = None
        self._static_scale = precision.static_scale
        if precision.autocast_dtype is not None:
            self._autocast = self._autocast_factory(precision.autocast_dtype)
            if precision.autocast_dtype is torch.float16:
                self._scaler = self._grad_scaler(precision)

        # distributed data parallelism, as DeepSpeed does it for a plain module
        import torch.distributed as dist

        dist_on = dist.is_available() and dist.is_initialized()
        self.world_size = batch.world_size
        self.global_rank = dist.get_rank() if dist_on else discover().rank
        self._dp = dist_on and dist.get_world_size() > 1 and not _is_data_parallel(module)
        if self._dp:
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor.data, src=0)
        elif batch.world_size > 1 and not dist_on:
            _log.warning(
                "world size %d but torch.distributed is not initialised: gradients are not "
                "averaged across ranks; call torch.distributed.init_process_group() before "
                "trainmon.initialize",
                batch.world_size,
            )

        # what to log: the instrument owns every measurement; the engine only drives it
        self.instrument = StepInstrument(
            self.monitor,
            samples_per_step=batch.micro_batch_size * batch.gradient_accumulation_steps,
            device=self.device,
            breakdown=config.wall_clock_breakdown,
        )

        # per-step state
        self._forwarded = False
        self._backward_since_step = False
        self._step_applied = False
        self._loader_timed = False  # the loader we built times its waits: no gap timing
        self._grad_norm: Any = None
        self._grad_norm_float: float | None = None
        self._params: list[Any] = []
        self._uniform_grads = True
        self._groups_seen = -1
        self._refresh_params()
        self.training_dataloader = (
            None if training_data is None else self._dataloader(training_data, collate_fn)
        )
        layers = self.monitor.config.trainmon
        if layers.layer_stats:  # per-layer health, hooked on the optimizer's step
            self.monitor.watch_layers(module, self.optimizer, depth=layers.layer_stats_depth)

    # ---- DeepSpeed's training API (the hot path) ----------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module (under autocast with fp16/bf16), timing it when training.

        Calls made while gradients are disabled (evaluation under ``torch.no_grad()``) are
        passed through untimed.
        """
        autocast = self._autocast
        if not self._is_grad_enabled():
            if autocast is None:
                return self.module(*args, **kwargs)
            with autocast():
                return self.module(*args, **kwargs)
        instrument = self.instrument
        instrument.data_end()  # with the user's own loader: the gap since backward/step
        instrument.forward_begin()
        self._forwarded = True
        try:
            if autocast is None:
                return self.module(*args, **kwargs)
            with autocast():
                return self.module(*args, **kwargs)
        finally:
            instrument.forward_end()

    __call__ = forward

    def backward(self, loss: Any, retain_graph: bool = False, scale_wrt_gas: bool = True) -> Any:
        """Backward of ``loss / gradient_accumulation_steps`` (times the fp16 loss scale).

        Returns the loss as given. Raises :class:`EngineUsageError` for a loss that is not a
        single-element tensor with a gradient, or when no forward ran since the last backward.
        """
        if not self._forwarded:
            raise EngineUsageError(
                "backward() was called before a forward pass: run loss = model(batch) through "
                "the engine first (not model.module), then model.backward(loss)"
            )
        if not isinstance(loss, self._tensor_type) or loss.numel() != 1:
            raise EngineUsageError(self._bad_loss_message(loss))
        if not loss.requires_grad:
            raise EngineUsageError(
                "backward(loss): the loss does not require a gradient; was it computed under "
                "torch.no_grad(), detached, or turned into a number? Pass the loss tensor "
                "returned by the model"
            )
        self._forwarded = retain_graph
        instrument = self.instrument
        # the graph is freed by this backward; only with retain_graph would it be kept alive
        instrument.record_loss(loss.detach() if retain_graph else loss)
        instrument.backward_begin()
        try:
            scaled: Any = loss / self._gas if scale_wrt_gas and self._gas != 1 else loss
            if self._scaler is not None:
                scaled = self._scaler.scale(scaled)
            scaled.backward(retain_graph=retain_graph)
        finally:
            instrument.backward_end()
        if self._dp and (self.micro_steps + 1) % self._gas == 0:
            instrument.comm_begin()
            try:
                self._allreduce_gradients()
            finally:
                instrument.comm_end()
        self._backward_since_step = True
        return loss

    def step(self, lr_kwargs: Mapping[str, Any] | None = None) -> None:
        """Count a micro-batch; at an accumulation boundary clip, step the optimizer and the
        scheduler, zero the gradients, log the step's metrics and run the monitor's
        ``on_step_end`` callbacks (which may raise ``TrainingStopped``)."""
        if not self._backward_since_step:
            raise EngineUsageError(
                "step() was called without a backward() since the previous step(): call "
                "model.backward(loss) once per micro-batch, then model.step()"
                if self.micro_steps
                else "step() was called before any backward(): call loss = model(batch) and "
                "model.backward(loss) first"
            )
        self._backward_since_step = False
        self._step_applied = applied = (self.micro_steps + 1) % self._gas == 0
        if applied:
            self._optimizer_step(lr_kwargs)
        self.micro_steps += 1
        if not self._loader_timed:
            # with the user's own loader, the wait for data is the gap until the next forward
            self.instrument.data_begin()
        if applied:
            monitor = self.monitor
            if monitor.callbacks or monitor.stop_reason is not None:
                # on_step_end callbacks; raises TrainingStopped when an alert asked to stop
                monitor.step_end(self, self.global_steps)

    def _optimizer_step(self, lr_kwargs: Mapping[str, Any] | None) -> None:
        instrument = self.instrument
        instrument.optimizer_begin()
        optimizer = self.optimizer
        scaler = self._scaler
        if len(optimizer.param_groups) != self._groups_seen:
            self._refresh_params()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if self._clip > 0.0:
            norm = self._clip_grad_norm(self._params, self._clip)
        else:
            grads = [p.grad for p in self._params if p.grad is not None]
            norm = grad_norm(grads, self._uniform_grads)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update(self._static_scale)
        else:
            optimizer.step()
        if self.lr_scheduler is not None:
            if lr_kwargs:
                self.lr_scheduler.step(**lr_kwargs)
            else:
                self.lr_scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        instrument.optimizer_end()
        self.global_steps += 1
        self.global_samples += self._batch.train_batch_size
        self._grad_norm = norm
        self._grad_norm_float = None
        instrument.record_grad_norm(norm)
        loss_scale: Any = None
        if scaler is not None:
            scale = getattr(scaler, "_scale", None)
            loss_scale = scale.clone() if scale is not None else math.nan
        instrument.step_end(
            self.global_steps, lr=optimizer.param_groups[0]["lr"], loss_scale=loss_scale
        )

    # ---- DeepSpeed's accessors ------------------------------------------------------------

    def is_gradient_accumulation_boundary(self) -> bool:
        """True when the next ``step()`` steps the optimizer (DeepSpeed's definition)."""
        return (self.micro_steps + 1) % self._gas == 0

    def was_step_applied(self) -> bool:
        """True when the last ``step()`` stepped the optimizer."""
        return self._step_applied

    def get_global_grad_norm(self) -> float | None:
        """The gradient norm of the last optimizer step, before clipping; None before the first.

        This reads the device value (a sync) when first asked for each step; the automatic
        ``train/grad_norm`` metric never does.
        """
        if self._grad_norm is None:
            return None
        if self._grad_norm_float is None:
            self._grad_norm_float = norm_value(self._grad_norm)
        return self._grad_norm_float

    def get_lr(self) -> list[float]:
        """The learning rate of each parameter group."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def train_batch_size(self) -> int:
        """Samples per optimizer step across all ranks."""
        return self._batch.train_batch_size

    def train_micro_batch_size_per_gpu(self) -> int:
        """Samples per forward on this rank."""
        return self._batch.micro_batch_size

    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        return self._gas

    def zero_grad(self) -> None:
        """Drop the accumulated gradients (set them to None)."""
        self.optimizer.zero_grad(set_to_none=True)

    def train(self, mode: bool = True) -> TrainmonEngine:
        """Put the module in training mode (or evaluation mode with ``mode=False``)."""
        self.module.train(mode)
        return self

    def eval(self) -> TrainmonEngine:
        """Put the module in evaluation mode."""
        self.module.eval()
        return self

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: fall through to the module, like DeepSpeed.
        module = self.__dict__.get("module")
        if module is None:
            raise AttributeError(name)
        return getattr(module, name)

    # ---- checkpoints (the logic lives in trainmon.integrations.checkpoint) --------------

    def save_checkpoint(
        self,
        save_dir: str,
        tag: str | None = None,
        client_state: Mapping[str, Any] | None = None,
        save_latest: bool = True,
    ) -> bool:
        """DeepSpeed's ``save_checkpoint`` (call it on every rank): model, optimizer,
        scheduler, grad scaler, counters, ``client_state`` and trainmon's state. Raises
        ``TrainingStopped`` instead of saving when a stop rule fired; see
        :func:`trainmon.integrations.checkpoint.save_checkpoint`. Timed into the journal
        (``trainmon goodput``'s checkpoint_save_s)."""
        with self.monitor.span("checkpoint_save"):
            return checkpoint.save_checkpoint(
                self,
                save_dir,
                tag,
                client_state,
                save_latest=save_latest,
                grad_scaler=self._scaler,
            )

    def load_checkpoint(
        self,
        load_dir: str,
        tag: str | None = None,
        load_module_strict: bool = True,
        load_optimizer_states: bool = True,
        load_lr_scheduler_states: bool = True,
        load_module_only: bool = False,
    ) -> tuple[str | None, dict[str, Any] | None]:
        """DeepSpeed's ``load_checkpoint``: ``(load_path, client_state)``, ``(None, None)``
        without a ``latest`` file; the monitor resumes at the next step. See
        :func:`trainmon.integrations.checkpoint.load_checkpoint`. Timed into the journal
        (``trainmon goodput``'s checkpoint_load_s)."""
        with self.monitor.span("checkpoint_load"):
            return checkpoint.load_checkpoint(
                self,
                load_dir,
                tag,
                load_module_strict=load_module_strict,
                load_optimizer_states=load_optimizer_states,
                load_lr_scheduler_states=load_lr_scheduler_states,
                load_module_only=load_module_only,
                grad_scaler=self._scaler,
            )

    # ---- lifecycle ------------------------------------------------------------------------

    def close(self, status: RunStatus = "success") -> None:
        """Log the collective summary, restore torch.distributed, close the engine's monitor
        (telling its writers ``status``, see :meth:`Monitor.close`).

        A monitor passed to :func:`initialize` is left open for its owner. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self.instrument.close()
        if self._owns_monitor:
            self.monitor.close(status)

    def __enter__(self) -> TrainmonEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(run_status(exc))

    def __repr__(self) -> str:
        return (
            f"<TrainmonEngine {type(self.module).__name__} step={self.global_steps} "
            f"batch={self._batch.train_batch_size}={self._batch.micro_batch_size}"
            f"x{self._gas}x{self._batch.world_size}>"
        )

    # ---- set-up helpers (off the hot path) -------------------------------------------------

    def _refresh_params(self) -> None:
        """Cache the optimizer's parameters; rebuilt when the number of groups changes."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self._params = params
        self._groups_seen = len(self.optimizer.param_groups)
        kinds = {(p.device, p.dtype) for p in params}
        self._uniform_grads = len(kinds) <= 1

    def _allreduce_gradients(self) -> None:
        """Average gradients across ranks, one flat all-reduce per (device, dtype) group.

        The step's mean loss rides along as one more element of the first fp32/fp64 group, so
        ``train/loss`` is the data-parallel mean at no extra collective (a separate one-element
        all-reduce only when every gradient is 16-bit).
        """
        import torch
        import torch.distributed as dist
        from torch import _utils

        flatten: Any = _utils._flatten_dense_tensors
        unflatten: Any = _utils._unflatten_dense_tensors
        groups: dict[tuple[Any, Any], list[torch.Tensor]] = {}
        for p in self._params if self._params else self.module.parameters():
            if p.grad is not None:
                groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        size = dist.get_world_size()
        instrument = self.instrument
        loss = instrument.local_loss()
        for (device, dtype), grads in groups.items():
            carries = loss is not None and dtype in (torch.float32, torch.float64)
            flat = flatten([*grads, loss.to(device, dtype)] if carries else grads)
            dist.all_reduce(flat)
            flat.div_(size)
            for grad, synced in zip(grads, unflatten(flat, grads), strict=True):
                grad.copy_(synced)
            if carries:
                instrument.replace_loss(flat[-1].clone())
                loss = None
        if loss is not None:  # only 16-bit gradients (or none): reduce the loss on its own
            reduced = loss.clone()  # the local mean may share the caller's loss storage
            dist.all_reduce(reduced)
            instrument.replace_loss(reduced.div_(size))

    def _autocast_factory(self, dtype: Any) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        import torch

        device_type = self.device.type
        if not torch.amp.is_autocast_available(device_type):
            raise ConfigError(
                f"mixed precision ({dtype}) needs torch.autocast on {device_type!r}, which this "
                f"torch does not support; turn fp16/bf16 off or move the model to a GPU"
            )
        return functools.partial(torch.autocast, device_type, dtype=dtype)

    def _grad_scaler(self, precision: Precision) -> Any:
        import torch

        device_type = self.device.type
        try:
            scaler = torch.amp.GradScaler(
                device_type,
                init_scale=precision.init_scale,
                growth_interval=precision.growth_interval,
            )
        except Exception as exc:
            raise ConfigError(
                f"fp16 needs torch.amp.GradScaler on {device_type!r}, which failed: {exc}; use "
                f"bf16 or turn fp16 off"
            ) from exc
        if not scaler.is_enabled():
            raise ConfigError(
                f"fp16: torch.amp.GradScaler is not available on {device_type!r} here; use bf16 "
                f"or turn fp16 off"
            )
        return scaler

    def _bad_loss_message(self, loss: Any) -> str:
        if isinstance(loss, self._tensor_type):
            return (
                f"backward(loss): the loss is a tensor of shape {tuple(loss.shape)}; expected a "
                f"single-element tensor: reduce it first, e.g. model.backward(loss.mean())"
            )
        return (
            f"backward(loss): the loss is a {type(loss).__name__} ({loss!r:.60}); expected the "
            f"scalar loss tensor returned by the forward pass (reduce with .mean() if needed)"
        )

    def _dataloader(self, dataset: Any, collate_fn: Callable[..., Any] | None) -> Any:
        """A DataLoader of the micro batch size whose waits are measured as ``perf/data_ms``.

        Shuffled like DeepSpeed: a ``DistributedSampler`` over the ranks when
        torch.distributed is initialised (call ``loader.sampler.set_epoch(epoch)`` each epoch),
        else a ``RandomSampler``. ``drop_last`` is false; no worker processes.
        """
        import torch.distributed as dist
        from torch.utils.data import DistributedSampler, RandomSampler

        sampler: Any
        if dist.is_available() and dist.is_initialized():
            sampler = DistributedSampler(
                dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank()
            )
        else:
            sampler = RandomSampler(dataset)
        return _timed_loader_class()(
            dataset,
            batch_size=self._batch.micro_batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            trainmon_engine=self,
        )


class _TimedIterator:
    """Wraps a DataLoader iterator: the wait for each batch is added to the engine's data time."""

    __slots__ = ("_engine", "_iterator")

    def __init__(self, iterator: Iterator[Any], engine: TrainmonEngine) -> None:
        self._iterator = iterator
        self._engine = engine

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        engine = self._engine
        engine._loader_timed = True
        instrument = engine.instrument
        instrument.data_begin()
        try:
            return next(self._iterator)
        finally:
            instrument.data_end()

    def __len__(self) -> int:
        return len(self._iterator)  # type: ignore[arg-type]


@functools.cache
def _timed_loader_class() -> type:
    """The DataLoader subclass, defined on first use so ``import trainmon`` needs no torch."""
    from torch.utils.data import DataLoader

    class TimedDataLoader(DataLoader):  # type: ignore[type-arg]
        """A DataLoader whose iterators report the wait for each batch to the engine."""

        def __init__(self, *args: Any, trainmon_engine: TrainmonEngine, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.trainmon_engine = trainmon_engine

        def __iter__(self) -> Any:
            return _TimedIterator(super().__iter__(), self.trainmon_engine)

    return TimedDataLoader


def _is_data_parallel(module: Any) -> bool:
    """True for modules that average gradients themselves (DDP, FSDP)."""
    names = {cls.__name__ for cls in type(module).__mro__}
    return bool(names & {"DistributedDataParallel", "FullyShardedDataParallel"})


# ---- the entry point --------------------------------------------------------------------------


def initialize(
    model: torch.nn.Module | None = None,
    optimizer: Any = None,
    model_parameters: Iterable[Any] | None = None,
    training_data: Any = None,
    lr_scheduler: Any = None,
    config: ConfigSource = None,
    *,
    monitor: Monitor | None = None,
    collate_fn: Callable[..., Any] | None = None,
    **deepspeed_kwargs: Any,
) -> tuple[TrainmonEngine, Any, Any, Any]:
    """``deepspeed.initialize`` for a plain PyTorch model: ``(engine, optimizer, loader, sched)``.

    ``optimizer`` is an optimizer, a function of the parameters, or None to build the config's
    ``"optimizer"`` section; ``lr_scheduler`` is a scheduler, a function of the optimizer, or
    None to build the config's ``"scheduler"`` (WarmupLR, WarmupDecayLR). ``training_data``
    gives back a DataLoader of ``train_micro_batch_size_per_gpu``. DeepSpeed's other keyword
    arguments (``args``, ``mpu``, ``dist_init_required``, ...) are accepted and ignored, except
    that ``args.deepspeed_config`` or ``config_params`` is used when ``config`` is None.
    """
    require("torch", "torch", "trainmon.initialize")
    unknown = sorted(set(deepspeed_kwargs) - _DEEPSPEED_KWARGS)
    if unknown:
        known = ["model", "optimizer", "model_parameters", "training_data", "lr_scheduler"]
        known += ["config", "monitor", "collate_fn", *sorted(_DEEPSPEED_KWARGS)]
        raise TypeError(
            f"initialize() got an unexpected keyword argument {unknown[0]!r}"
            + did_you_mean(unknown[0], known, start="; ")
        )
    if config is None:
        config = deepspeed_kwargs.get("config_params")
    if config is None:
        config = getattr(deepspeed_kwargs.get("args"), "deepspeed_config", None)
    if model is None:
        raise EngineUsageError("initialize() needs model=: the torch.nn.Module to train")
    cfg = load_config(config, engine=True)
    batch = resolve_batch_sizes(
        cfg.train_batch_size,
        cfg.train_micro_batch_size_per_gpu,
        cfg.gradient_accumulation_steps,
        discover().world_size,
    )
    params = model.parameters() if model_parameters is None else model_parameters
    optimizer = _make_optimizer(optimizer, cfg, params)
    lr_scheduler = _make_scheduler(lr_scheduler, cfg, optimizer)
    engine = TrainmonEngine(
        model,
        optimizer,
        config=cfg,
        batch=batch,
        lr_scheduler=lr_scheduler,
        monitor=monitor,
        training_data=training_data,
        collate_fn=collate_fn,
    )
    return engine, engine.optimizer, engine.training_dataloader, engine.lr_scheduler


def _make_optimizer(optimizer: Any, cfg: TrainmonConfig, params: Any) -> Any:
    import torch

    section = cfg.raw.get("optimizer")
    if optimizer is not None and section is not None:
        raise ConfigError(
            "the config has an 'optimizer' section and initialize() was also given optimizer=; "
            "keep one of them"
        )
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if callable(optimizer):
        return optimizer(params)
    if optimizer is not None:
        raise EngineUsageError(
            f"optimizer={optimizer!r}: expected a torch.optim.Optimizer or a function of the "
            f"parameters that returns one"
        )
    if section is None:
        raise EngineUsageError(
            "no optimizer: pass optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3) to "
            'trainmon.initialize, or add "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}} '
            "to the config"
        )
    return build_optimizer(section, params)


def _make_scheduler(lr_scheduler: Any, cfg: TrainmonConfig, optimizer: Any) -> Any:
    section = cfg.raw.get("scheduler")
    if lr_scheduler is not None and section is not None:
        raise ConfigError(
            "the config has a 'scheduler' section and initialize() was also given "
            "lr_scheduler=; keep one of them"
        )
    if lr_scheduler is None:
        return None if section is None else build_scheduler(section, optimizer)
    if hasattr(lr_scheduler, "step"):
        return lr_scheduler
    if callable(lr_scheduler):
        return lr_scheduler(optimizer)
    raise EngineUsageError(
        f"lr_scheduler={lr_scheduler!r}: expected a scheduler (with .step()) or a function of "
        f"the optimizer that returns one"
    )
