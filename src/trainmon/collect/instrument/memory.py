"""Memory per step: host RSS read in the background; CUDA allocator counters on a GPU."""

from __future__ import annotations

from typing import Any

from trainmon.collect.meters import PEAK_RSS_PROBE, RSS_PROBE, cuda_alloc_retries, cuda_memory_mb


class MemoryProbe:
    """Adds ``mem/*`` to a step: ``rss_mb`` and ``peak_rss_mb`` as probes resolved off the
    training thread; on CUDA ``allocated_mb``, ``peak_allocated_mb``, ``reserved_mb`` (host-side
    counters) and, every ``retries_every`` steps, ``alloc_retries``."""

    __slots__ = ("_cuda", "_device", "_retries_every")

    def __init__(self, device: Any = None, retries_every: int = 10) -> None:
        self._device = device
        self._cuda = getattr(device, "type", None) == "cuda"
        self._retries_every = max(1, retries_every)

    def add_to(self, items: list[tuple[str, Any]], step: int) -> None:
        """Append this step's memory metrics."""
        items.append(("mem/rss_mb", RSS_PROBE))
        items.append(("mem/peak_rss_mb", PEAK_RSS_PROBE))
        if self._cuda:
            allocated, peak, reserved = cuda_memory_mb(self._device)
            items.append(("mem/allocated_mb", allocated))
            items.append(("mem/peak_allocated_mb", peak))
            items.append(("mem/reserved_mb", reserved))
            if step % self._retries_every == 0:
                items.append(("mem/alloc_retries", cuda_alloc_retries(self._device)))
