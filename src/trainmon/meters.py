"""Probes for memory, loss and gradient norm that keep reads off the training thread.

The functions read a value now; the :class:`~trainmon.values.Deferred` probes are enqueued by
the training thread and read by the monitor's background thread, so reading ``/proc`` (I/O) or
turning device tensors into a number never happens on the training thread. torch is imported
only inside the functions that need it.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from typing import Any

from trainmon.values import Deferred

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


class RssProbe(Deferred):
    """``mem/rss_mb`` read when resolved, on the background thread (reading ``/proc`` is I/O).

    Stateless, so one instance is enqueued again and again.
    """

    __slots__ = ()

    def resolve(self) -> float:
        """The resident set size now, in MiB."""
        return rss_mb()


class PeakRssProbe(Deferred):
    """``mem/peak_rss_mb`` read when resolved, on the background thread.

    The kernel updates its high-water mark lazily, so the current RSS is taken into account:
    the peak is never below ``mem/rss_mb``.
    """

    __slots__ = ()

    def resolve(self) -> float:
        """The peak resident set size so far, in MiB."""
        return max(peak_rss_mb(), rss_mb())


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


def total_grad_norm(grads: Sequence[Any], same_device_and_dtype: bool) -> Any:
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


def cuda_memory_mb(device: Any) -> tuple[float, float, float]:
    """(allocated, peak allocated, reserved) MiB of ``device``: host-side allocator counters."""
    import torch

    cuda = torch.cuda
    return (
        cuda.memory_allocated(device) * _MB,
        cuda.max_memory_allocated(device) * _MB,
        cuda.memory_reserved(device) * _MB,
    )


def cuda_alloc_retries(device: Any) -> int:
    """How often the caching allocator freed its cache and retried (``num_alloc_retries``).

    ``torch.cuda.memory_stats`` builds a large dict, so callers sample it only now and then.
    """
    import torch

    return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))
