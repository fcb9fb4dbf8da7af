"""What ``trainmon.initialize`` builds before the engine exists, from DeepSpeed's sections:
batch arithmetic, optimizer and scheduler, precision."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmon.errors import ConfigError, TrainmonError, did_you_mean

if TYPE_CHECKING:
    import torch


# Keyword arguments of ``deepspeed.initialize`` that trainmon accepts and does not need.
DEEPSPEED_KWARGS = frozenset(
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
