"""The background's first stages: queued entries become one record per step.

One pass groups the values by step, in queue order, and sorts each value by its type (cached
per type: a dict lookup, not an ``isinstance`` per value): plain numbers are stored, copies
captured at the call are taken in order, and trainmon's own tensors and
:class:`~trainmon.core.values.Deferred` values hold their place in the record until the whole
batch is read at once (tensors in one device read, deferred values class by class). The
pipeline runs this on its thread, one batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

from trainmon.core.capture_store import CaptureStore
from trainmon.core.entries import Entry
from trainmon.core.events import Number, StepScalars
from trainmon.core.values import (
    CAPTURED,
    Deferred,
    Snapshot,
    is_tensor,
    plain_number,
    resolve_tensors,
)

_TENSOR, _DEFERRED, _CAPTURED, _OTHER = range(4)
_KINDS: dict[type, int] = {}  # what each type of value is, learnt on first sight
_MAX_KINDS = 256  # types remembered; beyond, a type is sorted on every value
_MISSING: Any = object()

#: A value read after the pass: the record's values, the name, the value standing in its place
#: (the tensor or Deferred itself) and what the name held before it (``_MISSING``: nothing).
Slot = tuple[dict[str, Number], str, Any, Any]


def _kind_of(value: object) -> int:
    kind = type(value)
    found = _KINDS.get(kind)
    if found is not None:
        return found
    if value is CAPTURED:
        found = _CAPTURED
    elif isinstance(value, Deferred):
        found = _DEFERRED
    elif is_tensor(value):
        found = _TENSOR
    else:
        return _OTHER  # not remembered: torch may be imported later (is_tensor is then True)
    if len(_KINDS) < _MAX_KINDS:
        _KINDS[kind] = found
    return found


class _Reads:
    """The batch's values that are not plain numbers: stored (a copy captured at the call, a
    numpy scalar) or held in place until the batch is read (tensors, Deferred values)."""

    def __init__(self, captured: Iterator[Number]) -> None:
        self.captured = captured
        self.tensors: list[Slot] = []
        self.deferred: list[Slot] = []

    def place(
        self, values: dict[str, Number], name: str, value: Any, before: Any, snapshot: bool
    ) -> None:
        """Put ``value`` (not a float or int) in ``values[name]``, or a stand-in for it."""
        kind = _kind_of(value)
        if kind == _TENSOR and not snapshot:  # a producer's tensor: read with the batch
            self.tensors.append((values, name, value, before))
        elif kind in (_TENSOR, _CAPTURED):  # copied at the call
            value = next(self.captured)
        elif kind == _DEFERRED:
            self.deferred.append((values, name, value, before))
        else:
            value = plain_number(value)
        values[name] = value

    def read(self, on_error: Callable[[str], None]) -> None:
        """Read the held values and put them in their places; deferred values first, since one
        that cannot be resolved may give its place back to a tensor."""
        if self.deferred:
            _fill(self.deferred, _resolve_deferred(self.deferred, on_error))
        if self.tensors:
            _fill(self.tensors, resolve_tensors([slot[2] for slot in self.tensors]))


def group_records(
    batch: list[Entry], on_error: Callable[[str], None], captures: CaptureStore | None = None
) -> list[StepScalars]:
    """Values by step into records, in queue order; tensors and deferred values are read in
    batches after the pass (a value that cannot be resolved is counted and skipped). Values
    of entries that hold a key of ``captures`` are taken from it, each key's at once."""
    stored = _take_stored(batch, captures)  # first: whatever fails below, the store moves on
    read = iter(Snapshot.numbers_of([entry[3] for entry in batch if type(entry[3]) is Snapshot]))
    reads = _Reads(iter(()))
    place = reads.place
    records: list[StepScalars] = []
    current_step: object = None
    values: dict[str, Number] = {}
    for wall_time, default_step, items, needs_resolving in batch:
        if type(items[0]) is str:  # names alone: every value captured, at the entry's step
            if default_step != current_step:
                values = {}
                records.append(StepScalars(default_step, wall_time, values))
                current_step = default_step
            key = needs_resolving
            numbers = islice(stored[key], len(items)) if type(key) is str else next(read)
            values.update(zip(items, numbers, strict=True))
            continue
        if not needs_resolving and len(items[0]) == 2:  # plain numbers, checked by the caller
            if default_step != current_step:
                values = {}
                records.append(StepScalars(default_step, wall_time, values))
                current_step = default_step
            try:
                values.update(items)  # pairs, in one C call
                continue
            except ValueError:  # some carry their own step: item by item below
                pass
        elif needs_resolving is not True:  # all numbers, or copies captured at the call
            snapshot = type(needs_resolving) is Snapshot
            captured = next(read) if snapshot else None
            step = _whole_step(items, default_step)
            if step is not None and (captured is None or len(captured) == len(items)):
                if step != current_step:  # one step's values, all captured or all numbers
                    values = {}
                    records.append(StepScalars(step, wall_time, values))
                    current_step = step
                values.update(zip(map(_first, items), captured or map(_second, items), strict=True))
                continue
            if captured is not None:
                reads.captured = iter(captured)
        elif needs_resolving is True and len(items[0]) == 2 and default_step != current_step:
            values = {}  # a step's values in one call (a driver's): pairs in one C call, ...
            try:
                values.update(items)
            except ValueError:
                values.clear()
            if len(values) == len(items):  # ... then what is not a number yet, in place
                records.append(StepScalars(default_step, wall_time, values))
                current_step = default_step
                held = reads.tensors
                for name, value in items:
                    kind = type(value)
                    if kind is not float and kind is not int:
                        if _KINDS.get(kind) == _TENSOR:  # a loss, a norm: the usual case
                            held.append((values, name, value, _MISSING))
                        else:
                            place(values, name, value, _MISSING, False)
                continue
            values = {}  # a name twice, or steps of their own: item by item below
        snapshot = type(needs_resolving) is Snapshot
        for item in items:
            if len(item) == 2:
                name, value = item
                step = default_step
            else:
                name, value, step = item
                if step is None:
                    step = default_step
                elif step is CAPTURED:  # captured before the value of the same item
                    step = int(next(reads.captured))
                elif type(step) is not int:
                    step = int(step)
            if step != current_step:
                values = {}
                records.append(StepScalars(step, wall_time, values))
                current_step = step
            kind = type(value)
            if needs_resolving and kind is not float and kind is not int:
                place(values, name, value, values.get(name, _MISSING), snapshot)
            else:
                values[name] = value
    reads.read(on_error)
    return [record for record in records if record.values]


_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)


def _take_stored(batch: list[Entry], captures: CaptureStore | None) -> dict[str, Iterator[Number]]:
    """The batch's values kept in ``captures``, key by key, in queue order."""
    counts: dict[str, int] = {}
    for entry in batch:
        key = entry[3]
        if type(key) is str:
            counts[key] = counts.get(key, 0) + len(entry[2])
    if not counts:
        return {}
    if captures is None:
        raise ValueError("entries hold captured values but no capture store was given")
    return {key: iter(captures.take(key, count)) for key, count in counts.items()}


def _whole_step(items: Sequence[Any], default_step: Any) -> Any:
    """The step of a call whose items are all pairs, or all triples of one int step (None
    otherwise: read item by item). Such a call, all numbers or all captured, is one record's
    values in one ``dict.update`` instead of a Python iteration per value: the background's
    time per value is time a tight loop waits for the GIL."""
    lengths = set(map(len, items))
    if lengths == {2}:
        return default_step
    if lengths == {3}:
        steps = set(map(_third, items))
        if len(steps) == 1:
            step = steps.pop()
            if type(step) is int:
                return step
    return None


def _fill(slots: list[Slot], numbers: Sequence[Number | None]) -> None:
    """Put each read value in its place, unless a later value of the same name took it; a
    value that could not be read (None) gives the place back to what it held before (last
    slot first, so that an earlier stand-in given back is then filled in turn)."""
    if None not in numbers:  # every value read: no place to give back, any order will do
        for (values, name, held, _), number in zip(slots, numbers, strict=True):
            if values.get(name, _MISSING) is held:
                values[name] = number  # type: ignore[assignment]  # None is not in numbers
        return
    for (values, name, held, before), number in reversed(list(zip(slots, numbers, strict=True))):
        if values.get(name, _MISSING) is not held:
            continue
        if number is not None:
            values[name] = number
        elif before is _MISSING:
            del values[name]
        else:
            values[name] = before


def _resolve_deferred(slots: list[Slot], on_error: Callable[[str], None]) -> list[Number | None]:
    """Every held deferred value, each class's at once (:meth:`Deferred.resolve_all`); one that
    cannot be resolved is counted and skipped (None)."""
    out: list[Number | None] = [None] * len(slots)
    by_class: dict[type[Deferred], list[int]] = {}
    for index, slot in enumerate(slots):
        by_class.setdefault(type(slot[2]), []).append(index)
    for kind, positions in by_class.items():
        try:
            numbers = kind.resolve_all([slots[i][2] for i in positions])
            if len(numbers) != len(positions):
                raise ValueError(f"{kind.__name__}.resolve_all gave {len(numbers)} values")
        except Exception:
            numbers = [_resolve_one(slots[i][1], slots[i][2], on_error) for i in positions]
        for i, number in zip(positions, numbers, strict=True):
            out[i] = number
    return out


def _resolve_one(name: str, value: Deferred, on_error: Callable[[str], None]) -> Number | None:
    try:
        return value.resolve()
    except Exception:
        on_error(f"could not resolve the value of {name!r}; skipped")
        return None
