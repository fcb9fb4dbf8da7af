"""Which process this is: rank and world size, decided once.

Order: ``torch.distributed`` when it is already imported and initialised; else the launcher's
environment variables ``RANK``/``WORLD_SIZE`` (torchrun, DeepSpeed), ``OMPI_COMM_WORLD_RANK``/
``OMPI_COMM_WORLD_SIZE`` (Open MPI), ``PMI_RANK``/``PMI_SIZE`` (MPICH, Intel MPI),
``SLURM_PROCID``/``SLURM_NTASKS`` (Slurm); else rank 0 of 1. torch is never imported here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

_ENV_PAIRS = (
    ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)


@dataclass(frozen=True)
class ProcessPlace:
    """This process's rank in the job and the job's size."""

    rank: int = 0
    world_size: int = 1


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


def writes_on(place: ProcessPlace) -> bool:
    """The default rank policy: only rank 0 writes."""
    return place.rank == 0
