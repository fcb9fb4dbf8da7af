"""``trainmon.initialize``: DeepSpeed's engine API for a plain PyTorch model, monitored by itself.

A thin driver: what is measured per step lives in
:class:`~trainmon.collect.instrument.StepInstrument`; the engine only calls its hooks around
forward, backward, the gradient all-reduce and the optimizer step, and keeps DeepSpeed's
bookkeeping (micro-batches, accumulation boundaries, fp16 loss scaling, checkpoints). The
metrics it logs and how it differs from DeepSpeed are in the docs (docs/getting-started.md,
"The engine").
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from trainmon.collect.instrument import StepInstrument
from trainmon.collect.instrument.gradnorm import grad_norm, norm_value
from trainmon.config import TrainmonConfig
from trainmon.core.place import discover
from trainmon.core.writer import RunStatus
from trainmon.errors import ConfigError
from trainmon.integrations import checkpoint
from trainmon.lifecycle import run_status
from trainmon.logging import get_logger
from trainmon.monitor import Monitor

if TYPE_CHECKING:
    import torch
from trainmon.integrations.engine_data import is_data_parallel, timed_loader_class
from trainmon.integrations.engine_setup import (
    BatchSizes,
    EngineUsageError,
    Precision,
    read_precision,
)

_log = get_logger("engine")


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

    def note_loader_timed(self) -> None:
        """The DataLoader this engine built times the waits for batches: from now on they are
        logged as ``perf/data_ms`` (a gap the engine cannot tell from user code never is)."""
        self.instrument.logs_data_wait = True

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
        self._dp = dist_on and dist.get_world_size() > 1 and not is_data_parallel(module)
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
            data_wait=False,  # until the loader built here is used (note_loader_timed)
            between_steps=True,
        )

        # per-step state
        self._forwarded = False
        self._backward_since_step = False
        self._step_applied = False
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
        instrument.between_end()  # the gap since step(), less the waits in our loader
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
        # detached: the graph's objects then die with the step, as in a bare loop, rather than
        # outlive a second of steps in the queue (young collections on this thread, full ones)
        instrument.record_loss(loss.detach())
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
        # until the next forward: user code, or a loader not ours (perf/between_steps_ms);
        # a wait in the loader built here pauses it and is perf/data_ms
        self.instrument.between_begin()
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
        due = instrument.grad_norm_due(self.global_steps + 1)  # trainmon.grad_norm_every
        norm: Any = None
        if self._clip > 0.0:
            norm = self._clip_grad_norm(self._params, self._clip)
        elif due:  # only for the metric: skipped on the steps it is not wanted
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
        if due:
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
        """The gradient norm of the last optimizer step, before clipping; None before the first
        (and, without ``gradient_clipping``, after a step ``trainmon.grad_norm_every`` skipped).

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
        return timed_loader_class()(
            dataset,
            batch_size=self._batch.micro_batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            trainmon_engine=self,
        )
