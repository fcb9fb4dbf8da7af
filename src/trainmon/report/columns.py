r"""How a run's values are held once read: compact columns of floats and steps.

Why apart from the readers: a journal of millions of scalars must fit in memory, so values are
gathered column-wise into ``array``\ s (8 bytes a value) that compare equal to the lists they
replace; the readers in :mod:`trainmon.report.loading` only decide what goes in.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


if TYPE_CHECKING:
    _FloatArray = array[float]
    _IntArray = array[int]
else:  # array is not subscriptable at run time before Python 3.12
    _FloatArray = _IntArray = array


class FloatColumn(_FloatArray):
    """Values of one metric, 8 bytes each (a list of floats costs 32): compares equal to a
    list of the same floats, so it reads like the list it replaces."""

    def __new__(cls, values: Iterable[float] = ()) -> FloatColumn:
        return super().__new__(cls, "d", values)  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self.tolist() == other
        return super().__eq__(other)

    __hash__ = None


class StepColumn(_IntArray):
    """Steps of one or more metrics, 8 bytes each; equal to a list of the same steps."""

    def __new__(cls, values: Iterable[int] = ()) -> StepColumn:
        return super().__new__(cls, "q", values)  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self.tolist() == other
        return super().__eq__(other)

    __hash__ = None


_SEGMENT_ROWS = 4096


class Columns:
    """Scalars records gathered column-wise into compact arrays.

    Consecutive records with the same names form a segment (at most ``_SEGMENT_ROWS`` rows)
    whose values are transposed in C (``zip(*rows)``), so a million scalars cost a few list
    operations per record, not per value. Metrics logged at the same steps share one
    :class:`StepColumn` (copied only when their steps part), so a journal of ten metrics per
    step holds about 9 bytes per value instead of the 40 or so of Python lists.
    """

    def __init__(self) -> None:
        self.raw: dict[str, tuple[StepColumn, FloatColumn]] = {}
        self.names: list[str] = []
        self.steps: list[int] = []
        self.rows: list[tuple[Any, ...]] = []
        self.dropped = 0

    def add(self, names: list[str], step: int, row: tuple[Any, ...]) -> None:
        if names != self.names or len(self.rows) >= _SEGMENT_ROWS:
            self.flush()
            self.names = names
        self.steps.append(step)
        self.rows.append(row)

    def flush(self) -> None:
        if not self.rows:
            return
        raw = self.raw
        names = self.names
        shared: dict[int, StepColumn] = {}  # an old steps column -> the one extended for it
        owners: dict[int, int] = {}
        for name in names:
            found = raw.get(name)
            if found is not None:
                owners[id(found[0])] = owners.get(id(found[0]), 0) + 1
        users: dict[int, int] = {}
        for found in raw.values():
            users[id(found[0])] = users.get(id(found[0]), 0) + 1
        fresh: StepColumn | None = None
        for name, column in zip(names, zip(*self.rows, strict=True), strict=True):
            found = raw.get(name)
            values = _floats(column)
            if values is None:  # strings, None, ...: convert one by one, drop non-numbers
                kept = [(s, number_or_none(v)) for s, v in zip(self.steps, column, strict=True)]
                self.dropped += sum(1 for _, v in kept if v is None)
                steps = StepColumn(s for s, v in kept if v is not None)
                values = FloatColumn(v for _, v in kept if v is not None)
                if found is None:
                    raw[name] = (steps, values)
                else:
                    own = StepColumn(found[0])
                    own.extend(steps)
                    found[1].extend(values)
                    raw[name] = (own, found[1])
                continue
            if found is None:
                if fresh is None:
                    fresh = StepColumn(self.steps)
                raw[name] = (fresh, values)
                continue
            old = found[0]
            key = id(old)
            target = shared.get(key)
            if target is None:
                # extend in place when every metric sharing it is in this segment
                target = old if users.get(key) == owners.get(key) else StepColumn(old)
                target.extend(self.steps)
                shared[key] = target
            found[1].extend(values)
            raw[name] = (target, found[1])
        self.steps = []
        self.rows = []


def _floats(column: tuple[Any, ...]) -> FloatColumn | None:
    """``column`` as a FloatColumn when every value is a number, else None."""
    try:
        return FloatColumn(column)
    except (TypeError, OverflowError):
        return None


class WindowRecords(Sequence[dict[str, Any]]):
    """The journal's window records, read from the file when asked for (one offset each
    in memory, instead of a dict of dicts per window)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        with open(self.path, "rb") as f:
            f.seek(self.offsets[index])
            record: dict[str, Any] = orjson.loads(f.readline())
        return record


def number_or_none(value: Any) -> float | None:
    """A journal value as a float: numbers, and the journal's spellings of NaN and infinities;
    None for anything else."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    return None
