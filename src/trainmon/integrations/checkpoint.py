"""Checkpoints with DeepSpeed's layout and signatures, carrying trainmon's own state.

``TrainmonEngine.save_checkpoint`` / ``load_checkpoint`` delegate here. The layout is
DeepSpeed's (for a model without ZeRO), so tools that read DeepSpeed checkpoints find their
way::

    <save_dir>/latest                                 the tag of the newest whole checkpoint
    <save_dir>/<tag>/mp_rank_00_model_states.pt       module, optimizer, lr_scheduler,
                                                      grad_scaler, counters, client_state keys
    <save_dir>/<tag>/trainmon_state_rank<r>.json      Monitor.state_dict() of rank r

Every file is written to a temporary name and renamed, and ``latest`` is written last, so a
process killed while saving leaves the previous checkpoint as the one that is loaded.
:func:`save_monitor_state` and :func:`load_monitor_state` are the part a driver around another
engine (``trainmon.attach`` for DeepSpeed's) reuses beside that engine's own files.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainmon.core.monitor_state import MONITOR_STATE_FORMAT, MONITOR_STATE_VERSION
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.monitor import Monitor

_log = get_logger("checkpoint")

LATEST_FILE = "latest"
MODEL_STATES_FILE = "mp_rank_00_model_states.pt"
MONITOR_STATE_FILE = "trainmon_state_rank{rank}.json"
"""Per-rank file name of :meth:`Monitor.state_dict` in a checkpoint's tag folder."""

# keys of the model states file that are not the caller's client_state (DeepSpeed's and ours)
_ENGINE_KEYS = frozenset(
    {
        "module",
        "optimizer",
        "lr_scheduler",
        "grad_scaler",
        "global_steps",
        "global_samples",
        "micro_steps",
        "skipped_steps",
        "dp_world_size",
        "mp_world_size",
        "ds_config",
        "ds_version",
        "trainmon_version",
    }
)


class CheckpointedEngine(Protocol):
    """What :func:`save_checkpoint` / :func:`load_checkpoint` use of an engine (public names,
    as DeepSpeed's engine has them); the counters are set back on load."""

    module: Any
    optimizer: Any
    lr_scheduler: Any
    monitor: Monitor
    global_steps: int
    global_samples: int
    micro_steps: int


def monitor_state_path(folder: str | os.PathLike[str], rank: int) -> Path:
    """Where rank ``rank``'s monitor state lives in a checkpoint folder."""
    return Path(folder) / MONITOR_STATE_FILE.format(rank=rank)


def save_monitor_state(monitor: Monitor, folder: str | os.PathLike[str]) -> Path:
    """Write ``monitor.state_dict()`` as JSON into ``folder`` (this rank's file), atomically.

    Call :meth:`Monitor.checkpoint_barrier` first: this does not check for a stop.
    """
    path = monitor_state_path(folder, monitor.place.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(monitor.state_dict(), indent=1, sort_keys=True, allow_nan=True)
    _write_atomically(path, text.encode())
    return path


def load_monitor_state(
    monitor: Monitor, folder: str | os.PathLike[str], *, step: int | None = None
) -> bool:
    """Resume ``monitor`` from the state saved in ``folder``: this rank's file, else rank 0's.

    Without a saved state, ``step`` (the checkpoint's step, when known) still resumes the
    step count and marks the restart in the writers. Returns whether a saved state was found.
    """
    for rank in (monitor.place.rank, 0):
        path = monitor_state_path(folder, rank)
        if path.is_file():
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path}: not a readable trainmon state: {exc}") from exc
            if rank != monitor.place.rank:
                state = {**state, "alerts": {}, "writers": {}}  # another rank's, except step
            if step is not None and state.get("step") != step:
                _log.warning(
                    "%s says step %s but the checkpoint is at step %d; using %d",
                    path,
                    state.get("step"),
                    step,
                    step,
                )
                state = {**state, "step": step}
            monitor.load_state_dict(state)
            return True
    if step is not None:
        monitor.load_state_dict(
            {"format": MONITOR_STATE_FORMAT, "version": MONITOR_STATE_VERSION, "step": step}
        )
    return False


# ---- the engine's checkpoints ---------------------------------------------------------------


def save_checkpoint(
    engine: CheckpointedEngine,
    save_dir: str | os.PathLike[str],
    tag: str | None = None,
    client_state: Mapping[str, Any] | None = None,
    *,
    save_latest: bool = True,
    grad_scaler: Any = None,
    config: Mapping[str, Any] | None = None,
) -> bool:
    """DeepSpeed's ``save_checkpoint``: returns True. Every rank calls it.

    First :meth:`Monitor.checkpoint_barrier` (across ranks): a stop rule that fired raises
    :class:`trainmon.TrainingStopped` and nothing is saved. Then rank 0 writes the model
    states file, every rank its trainmon state, and rank 0 ``latest`` once all are written.
    ``tag`` defaults to ``global_step<N>``; ``client_state`` keys come back from
    :func:`load_checkpoint` (they must not be one of the engine's own keys).
    """
    import torch

    monitor = engine.monitor
    monitor.checkpoint_barrier(all_ranks=True)
    tag = f"global_step{engine.global_steps}" if tag is None else str(tag)
    _check_tag(tag)
    client = dict(client_state or {})
    clash = sorted(set(client) & _ENGINE_KEYS)
    if clash:
        raise ValueError(
            f"save_checkpoint: client_state key(s) {clash} are the checkpoint's own; rename them"
        )
    folder = Path(save_dir) / tag
    folder.mkdir(parents=True, exist_ok=True)
    rank, world = _rank_and_world()
    if rank == 0:
        from trainmon.version import __version__

        states: dict[str, Any] = {
            "module": engine.module.state_dict(),
            "optimizer": engine.optimizer.state_dict() if engine.optimizer is not None else None,
            "lr_scheduler": (
                engine.lr_scheduler.state_dict() if engine.lr_scheduler is not None else None
            ),
            "grad_scaler": grad_scaler.state_dict() if grad_scaler is not None else None,
            "global_steps": engine.global_steps,
            "global_samples": engine.global_samples,
            "micro_steps": engine.micro_steps,
            "skipped_steps": 0,
            "dp_world_size": world,
            "mp_world_size": 1,
            "ds_config": dict(config) if config is not None else None,
            "trainmon_version": __version__,
            **client,
        }
        temporary = folder / (MODEL_STATES_FILE + ".tmp")
        torch.save(states, temporary)
        os.replace(temporary, folder / MODEL_STATES_FILE)
    save_monitor_state(monitor, folder)
    _barrier()
    if save_latest and rank == 0:
        _write_atomically(Path(save_dir) / LATEST_FILE, tag.encode())
    _barrier()
    return True


def load_checkpoint(
    engine: CheckpointedEngine,
    load_dir: str | os.PathLike[str],
    tag: str | None = None,
    *,
    load_module_strict: bool = True,
    load_optimizer_states: bool = True,
    load_lr_scheduler_states: bool = True,
    load_module_only: bool = False,
    grad_scaler: Any = None,
) -> tuple[str | None, dict[str, Any] | None]:
    """DeepSpeed's ``load_checkpoint``: ``(path of the model states file, client_state)``, or
    ``(None, None)`` (with a warning) when ``tag`` is None and there is no ``latest`` file.

    Restores the module, the optimizer, the scheduler, the grad scaler and the step counters,
    then resumes the monitor (:func:`load_monitor_state`): it logs again from the next step.
    """
    import torch

    if tag is None:
        latest = Path(load_dir) / LATEST_FILE
        if not latest.is_file():
            _log.warning(
                "load_checkpoint: no %r file in %s, so no checkpoint is loaded; pass tag= to "
                "load a given one",
                LATEST_FILE,
                load_dir,
            )
            return None, None
        tag = latest.read_text().strip()
    _check_tag(tag)
    folder = Path(load_dir) / tag
    path = folder / MODEL_STATES_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"load_checkpoint: {path} does not exist; is {str(tag)!r} a checkpoint saved by "
            f"save_checkpoint in {load_dir}?"
        )
    # the caller's own checkpoint: client_state may hold any picklable object, as in DeepSpeed
    states: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    engine.module.load_state_dict(states["module"], strict=load_module_strict)
    if not load_module_only:
        optimizer_state = states.get("optimizer")
        if load_optimizer_states and optimizer_state is not None and engine.optimizer is not None:
            engine.optimizer.load_state_dict(optimizer_state)
        scheduler_state = states.get("lr_scheduler")
        if (
            load_lr_scheduler_states
            and scheduler_state is not None
            and engine.lr_scheduler is not None
        ):
            engine.lr_scheduler.load_state_dict(scheduler_state)
        scaler_state = states.get("grad_scaler")
        if grad_scaler is not None and scaler_state is not None:
            grad_scaler.load_state_dict(scaler_state)
        engine.global_steps = int(states.get("global_steps", 0))
        engine.global_samples = int(states.get("global_samples", 0))
        engine.micro_steps = int(states.get("micro_steps", 0))
        load_monitor_state(engine.monitor, folder, step=engine.global_steps)
    client = {k: v for k, v in states.items() if k not in _ENGINE_KEYS}
    return str(path), client


# ---- helpers ---------------------------------------------------------------------------------


def _check_tag(tag: str) -> None:
    if not tag or tag in (".", "..") or "/" in tag or "\\" in tag or "\n" in tag:
        raise ValueError(
            f"checkpoint tag {tag!r}: expected a folder name (no '/', not '.' or '..'), "
            f"such as 'global_step100'"
        )


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def _rank_and_world() -> tuple[int, int]:
    torch: Any = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


def _barrier() -> None:
    torch: Any = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    if dist.get_world_size() > 1:
        dist.barrier()
