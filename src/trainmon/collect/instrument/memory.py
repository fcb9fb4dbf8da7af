"""Memory per step: host RSS and, on a GPU, the CUDA allocator's counters, all read in the
background."""

from __future__ import annotations

from typing import Any

from trainmon.collect.meters import PEAK_RSS_PROBE, RSS_PROBE, cuda_memory_probes


class MemoryProbe:
    """Adds ``mem/*`` to a step as probes resolved off the training thread: ``rss_mb`` and
    ``peak_rss_mb``; on CUDA ``allocated_mb``, ``peak_allocated_mb``, ``reserved_mb`` and,
    every ``retries_every`` steps, ``alloc_retries``."""

    __slots__ = ("_cuda", "_retries", "_retries_every")

    def __init__(self, device: Any = None, retries_every: int = 10) -> None:
        self._cuda: list[tuple[str, Any]] = []
        self._retries: tuple[str, Any] | None = None
        if getattr(device, "type", None) == "cuda":
            probes = cuda_memory_probes(device)
            retries = probes.pop("alloc_retries")
            self._cuda = [(f"mem/{field}", probe) for field, probe in probes.items()]
            self._retries = ("mem/alloc_retries", retries)
        self._retries_every = max(1, retries_every)

    def add_to(self, items: list[tuple[str, Any]], step: int) -> None:
        """Append this step's memory metrics."""
        items.append(("mem/rss_mb", RSS_PROBE))
        items.append(("mem/peak_rss_mb", PEAK_RSS_PROBE))
        if self._cuda:
            items.extend(self._cuda)
            if self._retries is not None and step % self._retries_every == 0:
                items.append(self._retries)
