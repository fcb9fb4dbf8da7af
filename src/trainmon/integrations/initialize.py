"""``trainmon.initialize``: DeepSpeed's ``initialize`` for a plain PyTorch model, returning a
:class:`~trainmon.integrations.engine.TrainmonEngine` that monitors itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trainmon.config import ConfigSource, TrainmonConfig, load_config
from trainmon.core.place import discover
from trainmon.errors import ConfigError, did_you_mean
from trainmon.extras import require
from trainmon.monitor import Monitor

if TYPE_CHECKING:
    import torch
from trainmon.integrations.engine import TrainmonEngine
from trainmon.integrations.engine_setup import (
    DEEPSPEED_KWARGS,
    EngineUsageError,
    build_optimizer,
    build_scheduler,
    resolve_batch_sizes,
)


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
    unknown = sorted(set(deepspeed_kwargs) - DEEPSPEED_KWARGS)
    if unknown:
        known = ["model", "optimizer", "model_parameters", "training_data", "lr_scheduler"]
        known += ["config", "monitor", "collate_fn", *sorted(DEEPSPEED_KWARGS)]
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
