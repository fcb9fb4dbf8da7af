"""The step's loss: micro-batch losses accumulated without reading them on the training thread."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainmon.core.values import Deferred, is_tensor


class LossMean(Deferred):
    """The mean of a step's micro-batch losses (tensors and numbers), computed when resolved.

    The stacking, averaging and device-to-host copy happen on the background thread; NaN or
    Inf in any element propagates.
    """

    __slots__ = ("values",)

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = values

    def resolve(self) -> float | None:
        """The mean as a Python float (None for no values)."""
        values = self.values
        if not values:
            return None
        import torch

        tensors = [v for v in values if is_tensor(v)]
        total = math.fsum(float(v) for v in values if not is_tensor(v))
        if tensors:
            with torch.no_grad():
                first = tensors[0].device
                stacked = torch.stack([t.reshape(()).to(first, torch.float64) for t in tensors])
                total += float(stacked.sum().item())
        return total / len(values)


class LossAccumulator:
    """Collects one step's losses; :meth:`take` gives their mean (a number or a Deferred).

    A driver that averages the loss over data-parallel ranks itself (folded into its gradient
    all-reduce) reads :meth:`local_mean`, reduces it, and hands the result to :meth:`replace`.
    """

    __slots__ = ("_replaced", "_values")

    def __init__(self) -> None:
        self._values: list[Any] = []
        self._replaced: Any = None

    def add(self, loss: Any) -> None:
        """Add one micro-batch's loss: a single-element tensor or a number.

        The tensor is kept as given until the background reads it (up to a drain interval,
        a second): pass ``loss.detach()``, as trainmon's drivers do, or the step's autograd
        graph lives that long, and its objects, many steps' worth, fill the garbage
        collector's generations on the training thread.
        """
        self._values.append(loss)

    def __len__(self) -> int:
        return len(self._values)

    def local_mean(self) -> Any:
        """This step's mean so far as a 0-d float tensor (device operations, no sync), or None."""
        values = self._values
        if not values:
            return None
        import torch

        with torch.no_grad():
            if len(values) == 1 and is_tensor(values[0]):
                return values[0].detach().reshape(()).float()
            if all(is_tensor(v) for v in values):
                return torch.stack([v.detach().reshape(()).float() for v in values]).mean()
        return torch.tensor(float(LossMean(values).resolve() or math.nan))

    def replace(self, value: Any) -> None:
        """Log ``value`` (e.g. the data-parallel mean) instead of this step's local mean."""
        self._replaced = value

    def take(self) -> Any:
        """The step's loss value (None when no loss was added), and start the next step."""
        values = self._values
        replaced = self._replaced
        if not values and replaced is None:
            return None
        self._values = []
        if replaced is not None:
            self._replaced = None
            return replaced
        if len(values) == 1:
            return values[0]
        if not any(is_tensor(v) for v in values):
            return math.fsum(values) / len(values)
        return LossMean(values)
