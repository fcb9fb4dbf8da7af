"""The engine benchmark's contenders: one model and optimizer, bare loops and engines on them.

Why together: every contender must run on the same model, optimizer and batches (shared caches
and state), so that a paired round compares the step and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import trainmon

IN_FEATURES, HIDDEN, CLASSES, BATCH = 256, 1024, 10, 64
TINY_FEATURES = 16  # the tiny model: one Linear(16, 10), where the engine's own cost shows
#: The engine's grad norm as the training thread runs it (since the instrument component: one
#: ``_foreach_norm``, the rest in the background; before it, ``meters.total_grad_norm``).
ENGINE_NORM = "engine norm (training-thread part)"

StepFn = Callable[[torch.Tensor, torch.Tensor], None]
NormFn = Callable[[list[Any], bool], Any]


@dataclass
class Contender:
    """One way of running a training step, with what it measured."""

    key: str
    label: str
    step: StepFn
    engine: Any = None  # the TrainmonEngine, for the engine contenders
    wall_ns: list[int] = field(default_factory=list)  # every timed step
    cpu_ns: list[int] = field(default_factory=list)
    block_wall_ms: list[float] = field(default_factory=list)  # per round: median ms/step
    block_cpu_ms: list[float] = field(default_factory=list)
    other_cpu_ns: int = 0  # process CPU minus training-thread CPU, blocks incl. their flush
    other_steps: int = 0


def build_model(seed: int, tiny: bool = False) -> torch.nn.Module:
    """The benchmark MLP (or the tiny model), initialised from ``seed``."""
    torch.manual_seed(seed)
    if tiny:
        return torch.nn.Linear(TINY_FEATURES, CLASSES)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, CLASSES),
    )


def make_batches(
    count: int, seed: int, features: int = IN_FEATURES
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed random batches, reused cyclically (no data loading in the timed steps)."""
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(BATCH, features, generator=generator),
            torch.randint(0, CLASSES, (BATCH,), generator=generator),
        )
        for _ in range(count)
    ]


def engine_config(out_dir: Path, job: str, steps_per_print: int, clip: float) -> dict[str, Any]:
    """Every file writer on (TensorBoard, CSV, JSONL), console off, step-time breakdown on."""
    return {
        "train_micro_batch_size_per_gpu": BATCH,
        "steps_per_print": steps_per_print,
        "wall_clock_breakdown": True,
        "gradient_clipping": clip,
        "tensorboard": {"enabled": True, "output_path": str(out_dir / "tb"), "job_name": job},
        "csv_monitor": {"enabled": True, "output_path": str(out_dir / "csv"), "job_name": job},
        "jsonl": {"enabled": True, "output_path": str(out_dir / "jsonl"), "job_name": job},
        "console": {"enabled": False},
    }


def bare_steps(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, engine_norm: NormFn
) -> tuple[StepFn, StepFn, StepFn, StepFn]:
    """The bare loops: plain, plus the gradient norm, plus clipping to 1.0, plus the engine's
    own norm call (``engine_norm(grads, True)``, kept and never read, as the engine does on
    the training thread): the norm's cost inside a step, which is 2-3x its cost alone."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)
    clip_grad_norm = torch.nn.utils.clip_grad_norm_
    sink: list[Any] = [None]  # keeps the norm alive, as a logging user would; never read here

    def plain(x: torch.Tensor, y: torch.Tensor) -> None:
        loss: Any = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def with_norm(x: torch.Tensor, y: torch.Tensor) -> None:
        loss: Any = F.cross_entropy(model(x), y)
        loss.backward()
        if get_total_norm is not None:
            sink[0] = get_total_norm([p.grad for p in params if p.grad is not None])
        else:  # torch < 2.6: clip_grad_norm_ with an infinite bound computes the same norm
            sink[0] = clip_grad_norm(params, math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def with_clip(x: torch.Tensor, y: torch.Tensor) -> None:
        loss: Any = F.cross_entropy(model(x), y)
        loss.backward()
        sink[0] = clip_grad_norm(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def with_engine_norm(x: torch.Tensor, y: torch.Tensor) -> None:
        loss: Any = F.cross_entropy(model(x), y)
        loss.backward()
        sink[0] = engine_norm([p.grad for p in params if p.grad is not None], True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return plain, with_norm, with_clip, with_engine_norm


def engine_step(engine: Any) -> StepFn:
    """The seed's loop through the engine: ``loss = f(engine(x)); backward; step``."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = F.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()

    return step


def build_contenders(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, out_dir: Path, engine_norm: NormFn
) -> list[Contender]:
    """Every contender on the same model and optimizer (so caches and state are shared)."""
    plain, with_norm, with_clip, with_engine_norm = bare_steps(model, optimizer, engine_norm)
    contenders = [
        Contender("A", "bare loop", plain),
        Contender("A'", "bare loop + grad norm (get_total_norm)", with_norm),
        Contender("A''", "bare loop + clip_grad_norm_(1.0)", with_clip),
        Contender("An", "bare loop + the engine's norm call (kept, not read)", with_engine_norm),
    ]
    engines = (
        ("B1", "engine, all writers, window 1 step", 1, 0.0),
        ("B2", "engine, all writers, window 10 steps", 10, 0.0),
        ("B3", "engine, window 10, gradient_clipping 1.0", 10, 1.0),
    )
    for key, label, steps_per_print, clip in engines:
        job = key.lower()
        engine, _, _, _ = trainmon.initialize(
            model=model,
            optimizer=optimizer,
            config=engine_config(out_dir, job, steps_per_print, clip),
        )
        contenders.append(Contender(key, label, engine_step(engine), engine))
    return contenders
