"""Probes for memory, loss and gradient norm that keep reads off the training thread.

The functions read a value now; the :class:`~trainmon.core.values.Deferred` probes are enqueued by
the training thread and read by the monitor's background thread, so reading ``/proc`` (I/O) or
turning device tensors into a number never happens on the training thread. torch is imported
only inside the functions that need it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

from trainmon.core.values import Deferred

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20
_MB = 1.0 / 2**20


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux ``/proc``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """Highest resident set size this process has reached, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class _RssSampler:
    """Reads the resident set size through one kept-open ``/proc/self/statm`` descriptor.

    Used only by the background thread. Samples are reused for ``max_age_s``: the background
    thread resolves a whole batch of steps at once, so each step of a batch would read the same
    number anyway, and opening ``/proc`` files per step was the pipeline's largest cost.
    """

    def __init__(self, max_age_s: float = 0.02) -> None:
        self.max_age_s = max_age_s
        self._fd = -1
        self._pid = -1
        self._read_at = -1.0
        self._rss_mb = 0.0
        self._peak_mb = 0.0

    def rss_mb(self) -> float:
        """The current RSS in MiB (at most ``max_age_s`` old)."""
        self._refresh()
        return self._rss_mb

    def peak_mb(self) -> float:
        """The peak RSS in MiB, never below the current one (the kernel updates it lazily)."""
        self._refresh()
        return self._peak_mb

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < self.max_age_s:
            return
        self._read_at = now
        current = self._read_statm()
        self._rss_mb = current if current is not None else peak_rss_mb()
        self._peak_mb = max(peak_rss_mb(), self._rss_mb)

    def _read_statm(self) -> float | None:
        pid = os.getpid()
        try:
            if self._pid != pid:  # first use, or a forked child: /proc/self meant the parent
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._pid = pid
            return int(os.pread(self._fd, 128, 0).split()[1]) * _PAGE_MB
        except (OSError, AttributeError, IndexError, ValueError):
            return None


_SAMPLER = _RssSampler()


class RssProbe(Deferred):
    """``mem/rss_mb`` read when resolved, on the background thread (reading ``/proc`` is I/O).

    Stateless, so one instance is enqueued again and again.
    """

    __slots__ = ()

    def resolve(self) -> float:
        """The resident set size, in MiB."""
        return _SAMPLER.rss_mb()

    @classmethod
    def resolve_all(cls, values: Sequence[Deferred]) -> list[float | int | None]:
        """One sample for a batch of steps (each would read the same cached number)."""
        return [_SAMPLER.rss_mb()] * len(values)


class PeakRssProbe(Deferred):
    """``mem/peak_rss_mb`` read when resolved, on the background thread; never below the RSS."""

    __slots__ = ()

    def resolve(self) -> float:
        """The peak resident set size so far, in MiB."""
        return _SAMPLER.peak_mb()

    @classmethod
    def resolve_all(cls, values: Sequence[Deferred]) -> list[float | int | None]:
        """One sample for a batch of steps (each would read the same cached number)."""
        return [_SAMPLER.peak_mb()] * len(values)


RSS_PROBE = RssProbe()
PEAK_RSS_PROBE = PeakRssProbe()


class TensorMean(Deferred):
    """The mean of single-element tensors (a step's micro-batch losses), computed when resolved.

    The training thread only appends ``loss.detach()`` to a list; stacking, averaging and the
    device-to-host copy happen on the background thread. NaN or Inf in any element propagates.
    """

    __slots__ = ("tensors",)

    def __init__(self, tensors: Sequence[Any]) -> None:
        self.tensors = tensors

    def resolve(self) -> float | None:
        """The mean as a Python float (None for an empty list)."""
        tensors = self.tensors
        if not tensors:
            return None
        import torch

        with torch.no_grad():
            first = tensors[0].device
            stacked = torch.stack([t.reshape(()).to(first, torch.float64) for t in tensors])
            return float(stacked.mean().item())


def total_grad_norm(grads: list[Any], same_device_and_dtype: bool) -> Any:
    """The 2-norm of all gradients together, as a 0-d tensor: device operations only, no sync.

    With every gradient on one device and of one dtype (the usual case, decided once by the
    caller) this is one ``torch._foreach_norm`` and a norm of the stacked norms; otherwise it
    uses ``torch.nn.utils.get_total_norm`` (torch 2.6+), which groups by device and dtype.
    """
    import torch

    if not grads:
        return torch.zeros(())
    if same_device_and_dtype:
        if grads[0].dtype in (torch.float16, torch.bfloat16):  # add up in fp32: no overflow
            return torch.linalg.vector_norm(
                torch.stack(torch._foreach_norm(grads, 2, torch.float32))
            )
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)
    if get_total_norm is not None:
        return get_total_norm(grads)
    first = grads[0].device
    norms = [torch.linalg.vector_norm(g, dtype=torch.float32).to(first) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms))


#: ``mem/<field>`` on CUDA and where it sits in ``torch.cuda.memory_stats_as_nested_dict``.
CUDA_MEMORY_FIELDS: dict[str, tuple[str, ...]] = {
    "allocated_mb": ("allocated_bytes", "all", "current"),
    "peak_allocated_mb": ("allocated_bytes", "all", "peak"),
    "reserved_mb": ("reserved_bytes", "all", "current"),
    "alloc_retries": ("num_alloc_retries",),
}


class _CudaMemorySampler:
    """The caching allocator's counters of one device, read in one call and reused for
    ``max_age_s`` (a batch of steps resolves at once).

    ``torch.cuda.memory_allocated`` and its siblings each flatten and sort the whole stats dict
    in Python (75 µs apiece on an H200, against 15 µs for the nested dict), so the background
    thread reads the nested dict once instead. No call here waits for the device.
    """

    def __init__(self, device: Any, max_age_s: float = 0.02) -> None:
        self.device = device
        self.max_age_s = max_age_s
        self._read_at = -1.0
        self._values: dict[str, float] = {}

    def read(self, field: str) -> float:
        """``field`` of :data:`CUDA_MEMORY_FIELDS` now (at most ``max_age_s`` old)."""
        now = time.monotonic()
        if now - self._read_at >= self.max_age_s:
            import torch

            stats = torch.cuda.memory_stats_as_nested_dict(self.device)
            self._values = {name: _dig(stats, path) for name, path in CUDA_MEMORY_FIELDS.items()}
            self._read_at = now
        return self._values[field]


def _dig(stats: dict[str, Any], path: tuple[str, ...]) -> float:
    """The counter at ``path`` (0 where the allocator has none yet): bytes as MiB, counts as is."""
    value: Any = stats
    for key in path:
        value = value.get(key, 0) if isinstance(value, dict) else 0
    return float(value) * _MB if path[0].endswith("_bytes") else int(value)


class CudaMemoryProbe(Deferred):
    """``mem/<field>`` of a CUDA device, read when resolved on the background thread."""

    __slots__ = ("_field", "_sampler")

    def __init__(self, sampler: _CudaMemorySampler, field: str) -> None:
        self._sampler = sampler
        self._field = field

    def resolve(self) -> float:
        """The counter now, in MiB (a count for ``alloc_retries``)."""
        return self._sampler.read(self._field)


def cuda_memory_probes(device: Any) -> dict[str, CudaMemoryProbe]:
    """A probe per :data:`CUDA_MEMORY_FIELDS` name for ``device``, sharing one sampler."""
    sampler = _CudaMemorySampler(device)
    return {field: CudaMemoryProbe(sampler, field) for field in CUDA_MEMORY_FIELDS}
