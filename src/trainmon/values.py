"""What counts as a metric value: checked cheaply by the caller, resolved in the background.

Plain ``float``/``int``/``bool`` are taken as they are. numpy scalars and single-element torch
tensors (on any device) are accepted on the calling thread without touching their data; the
background thread turns them into Python numbers, tensors in one batched copy per device.
"""

from __future__ import annotations

import abc
import math
import sys
from collections.abc import Sequence
from typing import Any

from trainmon.events import Number
from trainmon.logging import get_logger

_log = get_logger("values")

PLAIN_TYPES = frozenset({float, int, bool})
#: What the call-site fast path passes through untouched: the background can store these as
#: they are (bools take the checked path and become 0/1).
NATIVE_TYPES = frozenset({float, int})


class Deferred(abc.ABC):
    """A value that is only known later: a device-event timing, a mean of device tensors, a
    memory probe. The training thread enqueues the object; the background thread calls
    :meth:`resolve`, so any waiting on the device happens there."""

    __slots__ = ()

    @abc.abstractmethod
    def resolve(self) -> Number | None:
        """The number (None: nothing to record). Runs on the background thread."""


_EXPECTED = "a bool, int, float, numpy scalar or single-element torch tensor"


_tensor_type: type | None = None


def is_tensor(value: Any) -> bool:
    """True for a torch tensor, decided without importing torch."""
    global _tensor_type
    if _tensor_type is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _tensor_type = torch.Tensor
    return isinstance(value, _tensor_type)


def check_value(name: str, value: Any) -> bool:
    """Accept (True), skip a ``None`` (False), or raise naming the metric and what was expected."""
    if value is None:
        return False
    kind = type(value)
    if kind in PLAIN_TYPES or isinstance(value, Deferred):
        return True
    if is_tensor(value):
        if value.numel() != 1:
            raise ValueError(
                f"metric {name!r}: tensor of shape {tuple(value.shape)} has {value.numel()} "
                f"elements; expected a single-element tensor (log a reduction such as .mean())"
            )
        if value.is_complex():
            raise TypeError(f"metric {name!r}: complex tensor; expected {_EXPECTED}")
        return True
    dtype = getattr(value, "dtype", None)
    if kind.__module__ == "numpy" and dtype is not None:
        if getattr(value, "size", 1) != 1:
            raise ValueError(
                f"metric {name!r}: array of shape {value.shape} has {value.size} elements; "
                f"expected a single number"
            )
        if dtype.kind not in "biuf":
            raise TypeError(f"metric {name!r}: numpy value of dtype {dtype}; expected {_EXPECTED}")
        return True
    if isinstance(value, (str, bytes)):
        raise TypeError(f"metric {name!r}: value {value!r} is a string; expected {_EXPECTED}")
    raise TypeError(
        f"metric {name!r}: value {value!r} of type {kind.__name__} is not a real number; "
        f"expected {_EXPECTED}"
    )


def plain_number(value: Any) -> Number:
    """A non-tensor accepted value as a Python int or float (bools become 0/1)."""
    kind = type(value)
    if kind is float or kind is int:
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return int(value)
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, bool):
        return int(item)
    if isinstance(item, (int, float)):
        return item
    return float(item)


def resolve_tensors(tensors: Sequence[Any]) -> list[Number]:
    """Python numbers for single-element tensors: one device-to-host copy per
    (device, dtype, shape), which in a training loop is one or two copies per batch.

    A tensor that cannot be read (a freed or faulty device buffer) becomes NaN and is reported.
    """
    import torch

    out: list[Number] = [math.nan] * len(tensors)
    groups: dict[tuple[Any, Any, Any], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.device, tensor.dtype, tensor.shape), []).append(index)
    with torch.no_grad():  # no per-tensor detach/reshape: stack as they are, flatten once
        for indices in groups.values():
            try:
                members = [tensors[i] for i in indices]
                stacked = torch.stack(members) if len(members) > 1 else members[0]
                numbers = stacked.reshape(-1).cpu().tolist()
            except Exception:
                _log.warning(
                    "could not read %d tensor value(s); logged as NaN", len(indices), exc_info=True
                )
                continue
            for i, number in zip(indices, numbers, strict=True):
                out[i] = int(number) if isinstance(number, bool) else number
    return out
