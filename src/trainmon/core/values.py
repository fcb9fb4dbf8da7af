"""What counts as a metric value: checked and captured by the caller, read in the background.

Plain ``float``/``int``/``bool`` are taken as they are; numpy scalars become Python numbers at
the call (no device involved). Single-element torch tensors (on any device) are *captured* at
the call without reading them: :func:`capture` stacks a call's tensors into one copy per dtype
(a device-side copy on an accelerator, ordered on its stream, with an event recorded after it),
so a later in-place change (``acc.zero_()``, ``tr_loss -= tr_loss``) does not change what was
logged, and the background thread waits for the event and reads the copy.
"""

from __future__ import annotations

import abc
import math
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

from trainmon.core.events import Number
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

    @classmethod
    def resolve_all(cls, values: Sequence[Deferred]) -> list[Number | None]:
        """:meth:`resolve` of each of ``values`` (all of this class), in order: the background
        thread resolves a batch of steps at once, and a class whose values combine in one
        device operation (a norm per step) overrides this to do so."""
        return [value.resolve() for value in values]


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


#: Integers at or beyond this magnitude have no float (``float(10**400)`` overflows).
FLOAT_INT_LIMIT = 2**1024 - 2**970
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def check_value(name: str, value: Any) -> bool:
    """Accept (True), skip a ``None`` (False), or raise naming the metric and what was expected."""
    if value is None:
        return False
    kind = type(value)
    if kind is int and not -FLOAT_INT_LIMIT < value < FLOAT_INT_LIMIT:
        raise ValueError(
            f"metric {name!r}: integer {_short(value)} is too large for a float; expected a "
            f"magnitude below 1.8e308 (log it as a float or a logarithm)"
        )
    if kind in PLAIN_TYPES or isinstance(value, Deferred):
        return True
    if is_tensor(value):
        check_tensor(name, value)
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


def check_tensor(name: str, value: Any) -> None:
    """Raise unless ``value`` is one real number held in readable memory (metadata only)."""
    if value.numel() != 1:
        raise ValueError(
            f"metric {name!r}: tensor of shape {tuple(value.shape)} has {value.numel()} "
            f"elements; expected a single-element tensor (log a reduction such as .mean())"
        )
    if value.is_complex():
        raise TypeError(f"metric {name!r}: complex tensor; expected {_EXPECTED}")
    if value.is_meta:
        raise ValueError(f"metric {name!r}: meta tensor (no data); expected {_EXPECTED}")
    if value.is_quantized:
        raise TypeError(
            f"metric {name!r}: quantized tensor of dtype {value.dtype}; log .dequantize()"
        )
    layout = str(value.layout)
    if layout != "torch.strided":
        raise TypeError(
            f"metric {name!r}: tensor with layout {layout}; expected a dense tensor "
            f"(log .to_dense())"
        )
    if value.dtype not in _real_dtypes():
        raise TypeError(f"metric {name!r}: tensor of dtype {value.dtype}; expected {_EXPECTED}")


def _short(number: int) -> str:
    """An integer for a message: its digits, or its magnitude when it is huge."""
    text = str(number) if number.bit_length() < 200 else f"of {len(str(abs(number)))} digits"
    return text


def check_step(step: Any, where: str) -> Any:
    """The step as a Python int in int64's range, or an integer tensor to capture; raise
    otherwise, naming ``where`` (``"metric 'train/loss'"``). Reads no device memory."""
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(f"{where}: step {step!r} is not an integer")
    if is_tensor(step):
        if step.numel() != 1 or step.is_meta or str(step.layout) != "torch.strided":
            raise TypeError(
                f"{where}: step {_describe(step)} is not one integer; expected an int or a "
                f"single-element integer tensor"
            )
        if step.dtype not in _int_dtypes():
            raise TypeError(
                f"{where}: step {_describe(step)} has dtype {step.dtype}; expected an integer"
            )
        if step.device.type != "cpu":
            return step  # read with the values, in the background: no sync here
    try:
        number = operator.index(step)
    except Exception as exc:  # numpy arrays of several elements, float tensors, ...
        raise TypeError(f"{where}: step {_describe(step)} is not one integer ({exc})") from None
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(
            f"{where}: step {_short(number)} is outside the 64-bit range that TensorBoard and "
            f"the journal store; expected -2**63 <= step < 2**63"
        )
    return number


def _describe(value: Any) -> str:
    """A short, data-free description of a value for a message (tensors are not printed)."""
    if is_tensor(value):
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_REAL: frozenset[Any] | None = None
_INTS: frozenset[Any] | None = None


def _real_dtypes() -> frozenset[Any]:
    """torch dtypes whose elements read back as Python bools, ints or floats."""
    global _REAL, _INTS
    if _REAL is None:
        import torch

        names = ("float16", "bfloat16", "float32", "float64", "bool")
        ints = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32")
        _INTS = frozenset(getattr(torch, n) for n in ints if hasattr(torch, n))
        _REAL = frozenset(getattr(torch, n) for n in names) | _INTS
    return _REAL


def _int_dtypes() -> frozenset[Any]:
    _real_dtypes()
    assert _INTS is not None
    return _INTS


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

    numbers = _read_as_one(torch, tensors)
    if numbers is not None:
        return numbers
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


def _read_as_one(torch: Any, tensors: Sequence[Any]) -> list[Number] | None:
    """The usual batch (a loop's losses and norms: one device, dtype and shape) in one
    ``torch.stack``, without reading each tensor's device and shape to group them; None when
    the dtypes differ (stacking would promote an int to a float), for bools, or when the
    stack refuses (devices or shapes differ): then they are read group by group."""
    if not tensors:
        return []
    dtype = tensors[0].dtype
    if dtype is torch.bool:
        return None
    for tensor in tensors:
        if tensor.dtype is not dtype:
            return None
    try:
        with torch.no_grad():
            numbers: list[Number] = torch.stack(list(tensors)).reshape(-1).cpu().tolist()
    except Exception:  # devices or shapes differ (or a tensor cannot be read): by group
        return None
    return numbers if len(numbers) == len(tensors) else None


# ---- capture at the call ---------------------------------------------------------------------


class _Captured:
    """Stands, in a queued item, for a tensor value or step held by the call's :class:`Snapshot`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<captured tensor>"


#: The placeholder that replaces a captured tensor in a queued item.
CAPTURED = _Captured()


class Snapshot:
    """Copies of one call's tensors, taken at the call; read on the background thread.

    :meth:`numbers` returns the values in capture order. On an accelerator it first waits for
    the event recorded after the copy (on the background thread, never the caller's). The
    usual call (one dtype) is one copy held directly: what waits in the queue is as few
    objects as the garbage collector can be given (a queue of containers that outlive the
    young collections promotes them, and each full collection scans the whole process).
    """

    __slots__ = ("_copy", "_count", "_event", "_parts")

    def __init__(
        self,
        count: int,
        copy: Any,
        event: Any = None,
        parts: list[tuple[Sequence[int], Any, Any]] | None = None,
    ) -> None:
        self._count = count
        self._copy = copy  # every value, in order (None: see parts)
        self._event = event
        self._parts = parts  # (capture positions, stacked copy, event or None)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return True  # an entry's flag: "needs resolving"

    def _all_parts(self) -> list[tuple[Sequence[int], Any, Any]]:
        if self._parts is not None:
            return self._parts
        return [(range(self._count), self._copy, self._event)]

    def numbers(self) -> list[Number]:
        """The captured values as Python numbers (NaN, reported, where a copy cannot be read)."""
        out: list[Number] = [math.nan] * self._count
        for positions, copy, event in self._all_parts():
            try:
                if event is not None:
                    event.synchronize()
                values = copy.reshape(-1).tolist()
            except Exception:
                _log.warning(
                    "could not read %d captured tensor value(s); logged as NaN",
                    len(positions),
                    exc_info=True,
                )
                continue
            for i, number in zip(positions, values, strict=True):
                out[i] = int(number) if isinstance(number, bool) else number
        return out

    @staticmethod
    def numbers_of(snapshots: Sequence[Snapshot]) -> list[list[Number]]:
        """:meth:`numbers` of each snapshot, the usual ones (one copy of one dtype) read in
        one device read per dtype and number of dimensions for the whole batch: a read per
        call costs the background thread a few microseconds of Python per call, which a
        tight loop pays in waiting for the GIL."""
        out: list[list[Number] | None] = [None] * len(snapshots)
        groups: dict[tuple[Any, int], list[int]] = {}
        for index, snapshot in enumerate(snapshots):
            copy = snapshot._copy
            if copy is not None:
                groups.setdefault((copy.dtype, copy.dim()), []).append(index)
            else:
                out[index] = snapshot.numbers()
        for (dtype, dims), members in groups.items():
            if len(members) == 1:
                out[members[0]] = snapshots[members[0]].numbers()
                continue
            try:
                flat = _read_copies([snapshots[i] for i in members], dims)
            except Exception:  # a copy that cannot be read: each on its own, NaN where it fails
                for i in members:
                    out[i] = snapshots[i].numbers()
                continue
            if dtype is _torch.bool:
                flat = [int(number) for number in flat]
            start = 0
            for i in members:
                end = start + snapshots[i]._count
                out[i] = flat[start:end]
                start = end
        return out  # type: ignore[return-value]  # every place filled above


def _read_copies(snapshots: Sequence[Snapshot], dims: int) -> list[Number]:
    """The values of single-copy snapshots of one dtype and number of dimensions, in order, in
    one read (each copy's event waited for first)."""
    copies = []
    for snapshot in snapshots:
        if snapshot._event is not None:
            snapshot._event.synchronize()
        copies.append(snapshot._copy)
    joined = _torch.stack(copies) if dims == 0 else _torch.cat(copies)
    numbers: list[Number] = joined.reshape(-1).tolist()
    return numbers


# torch as capture uses it, bound at its first call: importing trainmon must not import torch,
# and a call with tensors means torch is imported. Module globals, not attribute lookups:
# capture runs on every call with tensors.
_torch: Any = None
_grad_enabled: Callable[[], bool]
_set_grad_enabled: Callable[[bool], Any]
_strided: Any = None
_real: frozenset[Any] = frozenset()


def _bind_torch() -> None:
    global _torch, _grad_enabled, _set_grad_enabled, _strided, _real
    torch = sys.modules["torch"]
    _grad_enabled = torch.is_grad_enabled
    _set_grad_enabled = getattr(torch._C, "_set_grad_enabled", torch.set_grad_enabled)
    _strided = torch.strided
    _real = _real_dtypes()
    _torch = torch


def capture(
    tensors: Sequence[Any], names: Sequence[str] | None = None, bare_cpu: bool = False
) -> Snapshot | Any:
    """Copy single-element tensors now, without reading them on this thread.

    One ``torch.stack`` per dtype (usually one for the whole call) on the tensors' own device:
    on an accelerator that is one kernel queued on the current stream, ordered after whatever
    produced the values and before any later in-place change, plus an event the background
    thread waits on. Nothing here synchronises with the device. A tensor refused here raises,
    as :func:`check_tensor` does, naming the metric ``names[i]`` of ``tensors[i]`` (without
    names, by its position: for a caller that redoes a refused call through a naming check).
    With ``bare_cpu``, one copy on the CPU (the usual call) is returned as it is, not in a
    :class:`Snapshot` (for :class:`~trainmon.core.capture_store.CaptureStore`).
    """
    if _torch is None:
        _bind_torch()
    grad = _grad_enabled()
    if grad:
        _set_grad_enabled(False)  # the copy must not join (and keep alive) the caller's graph
    try:
        count = len(tensors)
        dtype = tensors[0].dtype
        for tensor in tensors:  # one dtype: no type promotion can change a value
            if tensor.dtype is not dtype:
                break
        else:  # the common case (inline: every call with tensors runs it), as _checked_copy
            if dtype in _real:
                try:
                    copy = _torch.stack(tensors) if count > 1 else tensors[0].clone()
                except Exception:
                    copy = None
                if (
                    copy is not None
                    and copy.numel() == count
                    and copy.layout is _strided
                    and not copy.is_meta
                ):
                    if bare_cpu and copy.is_cpu:
                        return copy
                    return Snapshot(count, copy, _event_after(_torch, copy))
        parts = _stack_by_kind(tensors) if count > 1 else None
        if parts is None:
            parts = _stack_groups(tensors, names or [f"#{i}" for i in range(count)])
    finally:
        if grad:
            _set_grad_enabled(True)
    return Snapshot(
        count, None, None, [(pos, copy, _event_after(_torch, copy)) for pos, copy in parts]
    )


def _stack_by_kind(tensors: Sequence[Any]) -> list[tuple[Sequence[int], Any]] | None:
    """Mixed dtypes or shapes: one copy per (dtype, number of dimensions), each checked as a
    whole (single-element tensors with as many dimensions have the same shape)."""
    groups: dict[tuple[Any, int], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.dtype, tensor.dim()), []).append(index)
    parts: list[tuple[Sequence[int], Any]] = []
    for (dtype, _), positions in groups.items():
        copy = _checked_copy([tensors[i] for i in positions]) if dtype in _real else None
        if copy is None:
            return None
        parts.append((positions, copy))
    return parts


def _checked_copy(tensors: Sequence[Any]) -> Any:
    """One copy of same-dtype tensors of a real dtype, or None when any of them needs the
    one-by-one check (devices or shapes differ, or a tensor is not one number in dense,
    readable memory): the copy's metadata proves it for all of them at once."""
    try:
        copy = _torch.stack(tensors) if len(tensors) > 1 else tensors[0].clone()
    except Exception:
        return None
    if copy.numel() != len(tensors) or copy.layout is not _strided or copy.is_meta:
        return None
    return copy


def _stack_groups(tensors: Sequence[Any], names: Sequence[str]) -> list[tuple[Sequence[int], Any]]:
    """Check each tensor (raising with its metric's name), then one copy per group."""
    groups: dict[tuple[Any, Any, Any], list[int]] = {}
    for index, (name, tensor) in enumerate(zip(names, tensors, strict=True)):
        check_tensor(name, tensor)
        groups.setdefault((tensor.device, tensor.dtype, tensor.shape), []).append(index)
    parts: list[tuple[Sequence[int], Any]] = []
    for positions in groups.values():
        members = [tensors[i] for i in positions]
        parts.append((positions, _torch.stack(members) if len(members) > 1 else members[0].clone()))
    return parts


def _event_after(torch: Any, copy: Any) -> Any:
    """An event recorded on the copy's stream (None on the CPU, where the copy is done)."""
    if not copy.is_cuda:
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(copy.get_device()))  # an int: no device parsing
    return event


def check_encodable(name: str) -> None:
    """Refuse a metric name that is not valid Unicode text (a lone surrogate such as
    ``"a\\ud800b"``): no file format can hold it, and the writers would lose its whole batch."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"metric name {name!r}: not valid Unicode text (character {error.start} is a lone "
            f"surrogate); expected a name that can be written as UTF-8"
        ) from None
