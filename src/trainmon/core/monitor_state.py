"""What a ``Monitor`` carries across a checkpoint, and the one collective that saving needs.

Checkpoint drivers (:mod:`trainmon.integrations.checkpoint`, ``trainmon.attach``) decide where
the state goes; this module only says what it is, so the core never depends on a driver.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.core.writer import Writer

_log = get_logger("checkpoint")


def agree_on_stop(reason: str | None) -> str | None:
    """``reason``, or, under torch.distributed with several ranks, the verdict of all ranks:
    one small all-reduce (every rank must call it), since alert rules run on one rank only."""
    torch: Any = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return reason
    if dist.get_world_size() < 2:
        return reason
    on_cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else "cpu"
    flag = torch.tensor([1.0 if reason is not None else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if reason is None and float(flag.item()) > 0:
        return 'an alert rule with "action": "stop" fired on another rank'
    return reason


MONITOR_STATE_FORMAT = "trainmon.monitor_state"
MONITOR_STATE_VERSION = 1
"""Version of :meth:`Monitor.state_dict`'s mapping; later versions only add keys."""


def keyed_writers(writers: Sequence[Writer]) -> list[tuple[str, Writer]]:
    """Each writer with its key in a saved state: its kind, ``<kind>-2`` for a second one."""
    seen: dict[str, int] = {}
    keyed = []
    for writer in writers:
        seen[writer.kind] = seen.get(writer.kind, 0) + 1
        count = seen[writer.kind]
        keyed.append((writer.kind if count == 1 else f"{writer.kind}-{count}", writer))
    return keyed


def writer_identities(writers: Sequence[Writer]) -> dict[str, Any]:
    """``{key: writer.identity()}`` for the writers that have one (a failing one is reported)."""
    identities: dict[str, Any] = {}
    for key, writer in keyed_writers(writers):
        try:
            identity = writer.identity()
        except Exception:
            _log.warning("%s writer: could not read its run identity", writer.kind, exc_info=True)
            continue
        if identity is not None:
            identities[key] = dict(identity)
    return identities


def checked_monitor_state(state: Any) -> tuple[int, Mapping[str, Any], Mapping[str, Any]]:
    """``(step, alerts, writers)`` of a :meth:`Monitor.state_dict` mapping; ``ValueError``
    naming the key for anything else."""
    if not isinstance(state, Mapping) or state.get("format") != MONITOR_STATE_FORMAT:
        raise ValueError(
            f"Monitor.load_state_dict: expected the mapping Monitor.state_dict() returned "
            f"(with 'format': {MONITOR_STATE_FORMAT!r}), got {f'{state!r:.80}'}"
        )
    version = state.get("version")
    if type(version) is not int or not 1 <= version <= MONITOR_STATE_VERSION:
        raise ValueError(
            f"Monitor.load_state_dict: 'version' = {version!r}: this trainmon reads "
            f"versions 1 to {MONITOR_STATE_VERSION}; upgrade trainmon to read it"
        )
    step = state.get("step")
    if type(step) is not int or step < 0:
        raise ValueError(f"Monitor.load_state_dict: 'step' = {step!r}: expected an int >= 0")
    alerts = state.get("alerts") or {}
    writers = state.get("writers") or {}
    if not isinstance(alerts, Mapping) or not isinstance(writers, Mapping):
        raise ValueError(
            "Monitor.load_state_dict: 'alerts' and 'writers' must be mappings, got "
            f"{alerts!r:.80} and {writers!r:.80}"
        )
    return step, alerts, writers
