"""The global gradient norm with the least work on the training thread."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainmon.collect.meters import total_grad_norm
from trainmon.core.values import Deferred


class NormOfNorms(Deferred):
    """The 2-norm of per-tensor 2-norms (0-d tensors), combined when resolved.

    The training thread issues one ``torch._foreach_norm``; stacking, the final norm and the
    device-to-host copy happen on the monitor's background thread.
    """

    __slots__ = ("norms",)

    def __init__(self, norms: Sequence[Any]) -> None:
        self.norms = norms

    def resolve(self) -> float:
        """The global norm as a Python float (NaN/Inf propagate)."""
        import torch

        with torch.no_grad():  # one step's norm; a batch of steps goes through resolve_all
            return float(torch.linalg.vector_norm(torch.stack(list(self.norms))).item())

    @classmethod
    def resolve_all(cls, values: Sequence[Deferred]) -> list[float | int | None]:
        """Many steps' norms in one device operation and one read: a stack of every per-tensor
        norm, one norm per row (the steps of a batch have the same gradients to add up)."""
        norms = [value.norms for value in values if isinstance(value, NormOfNorms)]
        width = len(norms[0]) if norms else 0
        uniform = len(norms) == len(values) and all(len(row) == width for row in norms)
        if not uniform or len(norms) < 2 or width == 0:
            return super().resolve_all(values)
        import torch

        with torch.no_grad():
            stacked = torch.stack([norm for row in norms for norm in row])
            rows = stacked.reshape(len(norms), width)
            return list(torch.linalg.vector_norm(rows, dim=1).tolist())


def grad_norm(grads: list[Any], same_device_and_dtype: bool) -> Any:
    """The global 2-norm of ``grads`` before clipping: a :class:`NormOfNorms` for gradients of
    one device and dtype (one device operation here), else a 0-d tensor (no sync either way)."""
    if not same_device_and_dtype or not grads:
        return total_grad_norm(grads, same_device_and_dtype)
    import torch

    if grads[0].dtype in (torch.float16, torch.bfloat16):  # add up in fp32: no overflow
        return NormOfNorms(torch._foreach_norm(grads, 2, torch.float32))
    return NormOfNorms(torch._foreach_norm(grads))


def norm_value(norm: Any) -> float:
    """A norm from :func:`grad_norm` as a float (reads the device: a sync on a GPU)."""
    if isinstance(norm, Deferred):
        value = norm.resolve()
        return math.nan if value is None else float(value)
    return float(norm)
