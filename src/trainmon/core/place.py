"""Where this process is: its rank, the job's size, its rank on the node, and who logs.

A leaf: imports nothing from trainmon but :mod:`trainmon.errors`, and never imports torch.
Rank order: ``torch.distributed`` when it is already imported and initialised; else the
launcher's ``RANK``/``WORLD_SIZE`` (torchrun, DeepSpeed), ``OMPI_COMM_WORLD_RANK``/
``OMPI_COMM_WORLD_SIZE`` (Open MPI), ``PMI_RANK``/``PMI_SIZE`` (MPICH, Intel MPI),
``SLURM_PROCID``/``SLURM_NTASKS`` (Slurm); else rank 0 of 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from trainmon.errors import ConfigError

_ENV_PAIRS = (
    ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)
#: Launcher variables holding this process's rank on its node, first found wins.
LOCAL_RANK_VARIABLES = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
#: ``trainmon.log_rank``: a rank, or ``"last"`` (world_size - 1: the last pipeline stage).
LogRank = int | Literal["last"]


@dataclass(frozen=True)
class ProcessPlace:
    """This process's rank in the job and the job's size; ``starts``, when its part of the job
    began (``(what, unix s)`` pairs from :func:`trainmon.core.process.claim_starts`)."""

    rank: int = 0
    world_size: int = 1
    starts: tuple[tuple[str, float], ...] = ()


def discover(env: Mapping[str, str] | None = None) -> ProcessPlace:
    """Rank and world size, in the documented order; never imports torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return ProcessPlace(dist.get_rank(), dist.get_world_size())
    env = os.environ if env is None else env
    for rank_key, size_key in _ENV_PAIRS:
        rank = env.get(rank_key)
        if rank is not None and rank.strip().isdigit():
            size = env.get(size_key, "")
            return ProcessPlace(int(rank), int(size) if size.strip().isdigit() else int(rank) + 1)
    return ProcessPlace()


def local_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's rank on its node, from the launcher's environment; 0 when unknown."""
    env = os.environ if env is None else env
    for key in LOCAL_RANK_VARIABLES:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def logging_rank(setting: LogRank, place: ProcessPlace) -> int:
    """The rank that writes (``trainmon.log_rank``): ``"last"`` is ``world_size - 1``.

    A rank outside the job is a :class:`ConfigError`: no rank would write at all.
    """
    rank = place.world_size - 1 if setting == "last" else setting
    if not 0 <= rank < place.world_size:
        raise ConfigError(
            f"'trainmon.log_rank' = {setting!r}: expected a rank below the world size "
            f'{place.world_size}, or "last"'
        )
    return rank


def writes_on_rank(place: ProcessPlace, per_rank_output: bool, log_rank: int = 0) -> bool:
    """The logging rank writes; with per-rank output every rank does (each in its own folder)."""
    return per_rank_output or place.rank == log_rank
