"""Histograms, text and hyper-parameters: captured at the call, built in the background.

The training thread only takes a snapshot (a tensor is cloned on its own device and stream, a
CUDA event marks when the copy is done; an array is copied; a mapping is flattened into plain
values). Nothing waits on the device and nothing is binned here: the background thread calls
:meth:`Pending.build`, which waits for the copy, bins it and returns the
:class:`~trainmon.core.events.Histogram` (or the text or hyper-parameters record) the writers get.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainmon.core.events import (
    SPAN_KINDS,
    AttemptEnd,
    Extra,
    Histogram,
    Hparams,
    HparamValue,
    Number,
    Progress,
    Span,
    Text,
)
from trainmon.core.values import is_tensor

#: Buckets of a histogram unless the call says otherwise (TensorBoard's own default).
DEFAULT_BINS = 30
#: Most buckets one histogram may have (W&B refuses more than 512).
MAX_BINS = 512
#: Longest text kept per :meth:`~trainmon.Monitor.log_text` call; longer text is cut.
MAX_TEXT_CHARS = 1 << 20


class Pending(abc.ABC):
    """What the training thread queued; the background thread turns it into a record."""

    __slots__ = ()

    @abc.abstractmethod
    def build(self) -> Extra | None:
        """The record for the writers (None: nothing to write). Runs on the background thread."""


# ---- histograms --------------------------------------------------------------------------------


class PendingHistogram(Pending):
    """A snapshot of the values (a cloned tensor or a copied array), binned when built."""

    __slots__ = ("bins", "done", "name", "step", "values", "wall_time")

    def __init__(
        self, name: str, values: Any, done: Any, step: int, wall_time: float, bins: int
    ) -> None:
        self.name = name
        self.values = values
        self.done = done
        self.step = step
        self.wall_time = wall_time
        self.bins = bins

    def build(self) -> Histogram:
        import numpy as np

        values = self.values
        if self.done is not None:
            self.done.synchronize()  # the clone on the training thread's stream has finished
        if is_tensor(values):
            if values.dtype.is_floating_point and values.element_size() < 4:
                values = values.float()  # numpy has no bfloat16
            values = values.reshape(-1).cpu().numpy()
        self.values = None  # free the snapshot as soon as it is binned
        return bin_values(self.name, np.asarray(values).reshape(-1), self)


def bin_values(name: str, flat: Any, where: PendingHistogram) -> Histogram:
    """Equal-width buckets over the finite values of the 1-D array ``flat``."""
    import numpy as np

    if flat.dtype.kind == "b":
        flat = flat.astype(np.uint8)
    flat = flat.astype(np.float64, copy=False)
    finite_mask = np.isfinite(flat)
    finite = flat if finite_mask.all() else flat[finite_mask]
    non_finite = int(flat.size - finite.size)
    if finite.size == 0:
        return Histogram(
            name, where.step, where.wall_time, (), (), math.nan, math.nan, 0, 0.0, 0.0, non_finite
        )
    low, high = float(finite.min()), float(finite.max())
    if low == high:  # one bucket holding everything
        edges: tuple[float, ...] = (low, high)
        counts: tuple[int, ...] = (int(finite.size),)
    else:
        histogram, bin_edges = np.histogram(finite, bins=where.bins, range=(low, high))
        edges = tuple(float(e) for e in bin_edges)
        counts = tuple(int(c) for c in histogram)
    return Histogram(
        name=name,
        step=where.step,
        wall_time=where.wall_time,
        edges=edges,
        counts=counts,
        min=low,
        max=high,
        num=int(finite.size),
        sum=float(finite.sum()),
        sum_squares=float(np.dot(finite, finite)),
        non_finite=non_finite,
    )


def snapshot_histogram(
    name: str, values: Any, step: int, wall_time: float, bins: int
) -> PendingHistogram:
    """Copy ``values`` now (no device sync), or raise naming the histogram and what was expected.

    Tensors are cloned on their device (for CUDA a recorded event says when the clone is done);
    numpy arrays and sequences of numbers are copied into a new array.
    """
    if type(bins) is not int or not 1 <= bins <= MAX_BINS:
        raise ValueError(
            f"log_histogram({name!r}): bins = {bins!r}: expected an integer from 1 to {MAX_BINS}"
        )
    if is_tensor(values):
        layout = str(values.layout)
        if layout != "torch.strided":
            raise TypeError(
                f"log_histogram({name!r}): a {layout} tensor; expected a dense tensor "
                "(call .to_dense() first)"
            )
        if values.device.type == "meta" or values.is_quantized or values.is_complex():
            raise TypeError(
                f"log_histogram({name!r}): a {values.device.type} {values.dtype} tensor has no "
                "readable real values; expected a dense real tensor on a CPU or accelerator"
            )
        if values.numel() == 0:
            raise ValueError(f"log_histogram({name!r}): the tensor is empty; expected values")
        copy = values.detach().clone()
        done = None
        if copy.device.type == "cuda":
            import torch

            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record()
        return PendingHistogram(name, copy, done, step, wall_time, bins)
    import numpy as np

    try:
        array = np.array(values, copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"log_histogram({name!r}): {type(values).__name__} cannot be read as numbers ({exc}); "
            "expected a tensor, a numpy array or a sequence of numbers"
        ) from None
    if array.dtype.kind not in "biuf" or array.ndim == 0:
        raise TypeError(
            f"log_histogram({name!r}): got {type(values).__name__} of dtype {array.dtype} and "
            f"{array.ndim} dimension(s); expected a tensor, a numpy array or a sequence of "
            "real numbers"
        )
    if array.size == 0:
        raise ValueError(f"log_histogram({name!r}): no values; expected at least one")
    return PendingHistogram(name, array, None, step, wall_time, bins)


# ---- text ------------------------------------------------------------------------------------


class PendingText(Pending):
    """A string is immutable: it is the snapshot."""

    __slots__ = ("record",)

    def __init__(self, record: Text) -> None:
        self.record = record

    def build(self) -> Text:
        return self.record


def check_text(name: str, text: Any) -> str:
    """The text to log (cut to :data:`MAX_TEXT_CHARS`), or raise naming the entry."""
    if not isinstance(text, str):
        raise TypeError(
            f"log_text({name!r}): got {type(text).__name__}; expected a string (format it first)"
        )
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "…"


# ---- hyper-parameters ------------------------------------------------------------------------


class PendingHparams(Pending):
    """Hyper-parameters already flattened at the call."""

    __slots__ = ("record",)

    def __init__(self, record: Hparams) -> None:
        self.record = record

    def build(self) -> Hparams:
        return self.record


def flatten_hparams(
    hparams: Mapping[str, Any], where: str = "log_hparams"
) -> dict[str, HparamValue]:
    """``{"optimizer": {"lr": 1e-3}}`` -> ``{"optimizer.lr": 1e-3}``, values made storable.

    Strings, bools, ints and floats stay as they are (numpy and single-element tensor values
    become numbers); ``None`` becomes ``"None"``; anything else (lists, paths, dtypes) its
    ``str()``. Keys must be strings.
    """
    if not isinstance(hparams, Mapping):
        raise TypeError(f"{where}: expected a mapping of name to value, got {hparams!r}")
    flat: dict[str, HparamValue] = {}
    open_mappings = {id(hparams)}  # the mappings being walked: one met again is a cycle

    def walk(prefix: str, mapping: Mapping[Any, Any]) -> None:
        for key, value in mapping.items():
            if not isinstance(key, str) or not key:
                raise TypeError(
                    f"{where}: key {key!r}{f' under {prefix!r}' if prefix else ''}: expected a "
                    "non-empty string"
                )
            full = f"{prefix}.{key}" if prefix else key
            if isinstance(value, Mapping):
                if id(value) in open_mappings:
                    raise ValueError(
                        f"{where}: {full!r} contains itself (a mapping that refers back to one "
                        "that holds it); expected a tree of mappings"
                    )
                open_mappings.add(id(value))
                walk(full, value)
                open_mappings.discard(id(value))
            else:
                flat[full] = _storable(value)

    walk("", hparams)
    return flat


def _storable(value: Any) -> HparamValue:
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        return value
    if value is None:
        return "None"
    item = getattr(value, "item", None)
    size = getattr(value, "size", None)
    numel = getattr(value, "numel", None)
    count = numel() if callable(numel) else size if isinstance(size, int) else None
    if callable(item) and count == 1:
        got = item()  # a numpy scalar or one-element tensor: a hyper-parameter, logged once
        if isinstance(got, (bool, int, float)):
            return _storable(got)
    return str(value)


def check_metrics(
    metrics: Mapping[str, Any] | None, where: str = "log_hparams"
) -> dict[str, Number]:
    """The ``metrics`` of :meth:`~trainmon.Monitor.log_hparams` as plain numbers."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{where}: metrics: expected a mapping of metric name to number")
    out: dict[str, Number] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where}: metric name {name!r}: expected a non-empty string")
        number = _storable(value)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise TypeError(
                f"{where}: metric {name!r} = {value!r}: expected a number (a metric the "
                "hyper-parameters are judged by, e.g. eval/loss)"
            )
        out[name] = number
    return out


def hparam_differences(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys whose value differs between runs (missing in some counts as different), sorted.

    An int and a float of the same value are the same (``3`` in a journal reads back as ``3.0``
    from TensorBoard, which holds every number as a double)."""
    keys = sorted(set().union(*runs)) if runs else []
    missing = object()
    return [key for key in keys if len({_same(run.get(key, missing)) for run in runs}) > 1]


def _same(value: Any) -> str:
    """What two equal hyper-parameter values have in common: ``repr``, ints as floats."""
    if type(value) is int and -(2**53) <= value <= 2**53:
        return repr(float(value))
    return repr(value)


class PendingProgress(Pending):
    """A new total step count, for the console's progress and ETA."""

    __slots__ = ("record",)

    def __init__(self, total_steps: int) -> None:
        self.record = Progress(total_steps)

    def build(self) -> Progress:
        return self.record


class PendingMark(Pending):
    """A span or an attempt's end: plain values, already the record."""

    __slots__ = ("record",)

    def __init__(self, record: Span | AttemptEnd) -> None:
        self.record = record

    def build(self) -> Span | AttemptEnd:
        return self.record


class SpanTimer:
    """``with monitor.span(kind):`` — the wall time of the block, recorded when it ends
    (also when it raises: a failed save took that time too)."""

    __slots__ = ("_record", "kind", "start_time")

    def __init__(self, record: Callable[[str, float, float], None], kind: str) -> None:
        if kind not in SPAN_KINDS:
            raise ValueError(f"Monitor.span({kind!r}): expected one of {', '.join(SPAN_KINDS)}")
        self._record = record
        self.kind = kind
        self.start_time = 0.0

    def __enter__(self) -> SpanTimer:
        self.start_time = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        self._record(self.kind, self.start_time, time.time())


def check_total_steps(total_steps: Any) -> int:
    """``set_total_steps``'s argument as an int >= 1, or an error naming it."""
    if isinstance(total_steps, bool) or not hasattr(total_steps, "__index__"):
        raise TypeError(f"set_total_steps: {total_steps!r}: expected an integer >= 1")
    total = int(total_steps.__index__())
    if total < 1:
        raise ValueError(f"set_total_steps: {total}: expected an integer >= 1")
    return total
