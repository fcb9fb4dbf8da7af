"""DeepSpeed compatibility: the keys trainmon leaves alone, and what ``initialize`` builds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmon.errors import ConfigError, did_you_mean

#: Top-level keys ``trainmon.initialize`` reads to build the training objects (``Monitor`` and
#: ``attach`` leave them to DeepSpeed).
ENGINE_KEYS = ("optimizer", "scheduler", "fp16", "bf16", "bfloat16")
#: Top-level keys of DeepSpeed's config that trainmon does not use (``validate`` lists them).
DEEPSPEED_KEYS = frozenset(
    {
        "activation_checkpointing", "aio", "amp", "autotuning", "checkpoint",
        "communication_data_type", "compile", "compression_training", "curriculum_learning",
        "data_efficiency", "data_types", "dataloader_drop_last", "disable_allgather",
        "disable_python_gc", "dump_state", "eigenvalue", "elasticity", "flops_profiler",
        "fp32_allreduce", "gradient_allreduce_op", "gradient_predivide_factor",
        "graph_harvesting", "hybrid_engine", "load_universal_checkpoint", "memory_breakdown",
        "mics_hierarchical_params_gather", "mics_shard_size", "nebula", "pipeline",
        "prescale_gradients", "progressive_layer_drop", "quantize_training", "seed",
        "seq_parallel_communication_data_type", "sequence_parallel_size", "sparse_attention",
        "sparse_gradients", "tensor_parallel", "timers", "torch_autocast",
        "use_data_before_expert_parallelism",
        "use_node_local_storage", "vocabulary_size", "weight_quantization",
        "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "zero_optimization",
    }
)  # fmt: skip
OPTIMIZER_TYPES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
SCHEDULER_TYPES = {"warmuplr": "WarmupLR", "warmupdecaylr": "WarmupDecayLR"}


def check_engine_sections(raw: Mapping[str, Any]) -> None:
    """Check what ``trainmon.initialize`` builds from DeepSpeed's sections, before any torch
    object exists: ``optimizer`` and ``scheduler`` types and keys, ``fp16``/``bf16``."""
    section = raw.get("optimizer")
    if section is not None:
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"'optimizer' = {section!r}: expected a mapping such as "
                f'{{"type": "AdamW", "params": {{"lr": 0.001}}}}'
            )
        kind = section.get("type")
        if not isinstance(kind, str) or kind.lower() not in OPTIMIZER_TYPES:
            extra = did_you_mean(str(kind), list(OPTIMIZER_TYPES.values()), start="; ")
            raise ConfigError(
                f"'optimizer.type' = {kind!r}: trainmon.initialize builds "
                f"{', '.join(OPTIMIZER_TYPES.values())} (any case){extra}, or pass optimizer="
            )
        if not isinstance(section.get("params", {}), Mapping):
            raise ConfigError(
                f"'optimizer.params' = {section['params']!r}: expected a mapping of arguments"
            )
    section = raw.get("scheduler")
    if section is not None:
        _check_scheduler(section)
    for key in ("fp16", "bf16", "bfloat16"):
        value = raw.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"{key!r} = {value!r}: expected a mapping such as {{'enabled': true}}"
            )


def _check_scheduler(section: Any) -> None:
    if not isinstance(section, Mapping):
        raise ConfigError(f"'scheduler' = {section!r}: expected a mapping with 'type' and 'params'")
    kind = section.get("type")
    if not isinstance(kind, str) or kind.lower() not in SCHEDULER_TYPES:
        extra = did_you_mean(str(kind), list(SCHEDULER_TYPES.values()), start="; ")
        raise ConfigError(
            f"'scheduler.type' = {kind!r}: trainmon.initialize builds "
            f"{', '.join(SCHEDULER_TYPES.values())}{extra}; for any other schedule pass "
            f"lr_scheduler="
        )
    given = section.get("params", {}) or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"'scheduler.params' = {given!r}: expected a mapping of arguments")
    decay = SCHEDULER_TYPES[kind.lower()] == "WarmupDecayLR"
    known = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"}
    known |= {"total_num_steps"} if decay else set()
    unknown = sorted(set(given) - known - {"last_batch_iteration"})
    if unknown:
        hint = did_you_mean(unknown[0], sorted(known), start="; ")
        raise ConfigError(
            f"'scheduler.params' has unknown key(s) {unknown}{hint}; valid keys: {sorted(known)}"
        )
    if given.get("warmup_type", "log") not in ("log", "linear"):
        raise ConfigError(
            f"'scheduler.params.warmup_type' = {given['warmup_type']!r}: expected 'log' or 'linear'"
        )
    if decay and "total_num_steps" not in given:
        raise ConfigError("'scheduler.params.total_num_steps' is required for WarmupDecayLR")
    for key in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"):
        value = given.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < float("inf")
        ):
            raise ConfigError(
                f"'scheduler.params.{key}' = {value!r}: expected a finite number >= 0"
            )
