"""The background's first stages: queued entries become one record per step.

Stage 1 reads values: trainmon's own tensors in one device read, the copies captured at the
call, and :class:`~trainmon.core.values.Deferred` values class by class; stage 2 groups the
values by step, in queue order. The pipeline runs both on its thread, one batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


def resolve_tensor_values(batch: list[Entry]) -> tuple[Iterator[Number], Iterator[Number]]:
    """Stage 1: the values of trainmon's own tensors (read in one batch) and of the tensor
    copies captured at the call, each in queue order, for :func:`group_records` to take from."""
    tensors = [
        item[1] for entry in batch if entry[3] is True for item in entry[2] if is_tensor(item[1])
    ]
    resolved = iter(resolve_tensors(tensors) if tensors else [])
    captured = iter(
        [n for entry in batch if type(entry[3]) is Snapshot for n in entry[3].numbers()]
    )
    return resolved, captured


def resolve_deferred_values(
    batch: list[Entry], on_error: Callable[[str], None]
) -> list[Number | None]:
    """Stage 1 too: every :class:`Deferred` value of the batch, in queue order, each class's
    at once (:meth:`Deferred.resolve_all`); one that cannot be resolved is counted and
    skipped (None)."""
    found = [
        item for entry in batch if entry[3] for item in entry[2] if isinstance(item[1], Deferred)
    ]
    if not found:
        return []
    out: list[Number | None] = [None] * len(found)
    by_class: dict[type[Deferred], list[int]] = {}
    for index, item in enumerate(found):
        by_class.setdefault(type(item[1]), []).append(index)
    for kind, positions in by_class.items():
        try:
            values = kind.resolve_all([found[i][1] for i in positions])
            if len(values) != len(positions):
                raise ValueError(f"{kind.__name__}.resolve_all gave {len(values)} values")
        except Exception:
            values = [_resolve_one(found[i][0], found[i][1], on_error) for i in positions]
        for i, value in zip(positions, values, strict=True):
            out[i] = value
    return out


def _resolve_one(name: str, value: Deferred, on_error: Callable[[str], None]) -> Number | None:
    try:
        return value.resolve()
    except Exception:
        on_error(f"could not resolve the value of {name!r}; skipped")
        return None


def group_records(
    batch: list[Entry],
    resolved: Iterator[Number],
    captured: Iterator[Number],
    deferred: Iterator[Number | None],
) -> list[StepScalars]:
    """Stage 2: values by step into records, in queue order (a value that cannot be
    resolved is counted and skipped)."""
    records: list[StepScalars] = []
    current_step: object = None
    values: dict[str, Number] = {}
    for wall_time, default_step, items, needs_resolving in batch:
        if not needs_resolving and len(items[0]) == 2:  # plain numbers, checked by the caller
            if default_step != current_step:
                values = {}
                records.append(StepScalars(default_step, wall_time, values))
                current_step = default_step
            try:
                values.update(items)  # type: ignore[arg-type]  # pairs, in one C call
                continue
            except ValueError:  # some carry their own step: item by item below
                pass
        for item in items:
            if len(item) == 2:
                name, value = item
                step = default_step
            else:
                name, value, step = item
                if step is None:
                    step = default_step
                elif step is CAPTURED:  # captured before the value of the same item
                    step = int(next(captured))
                elif type(step) is not int:
                    step = int(step)
            if step != current_step:
                values = {}
                records.append(StepScalars(step, wall_time, values))
                current_step = step
            if needs_resolving:
                kind = type(value)
                if kind is not float and kind is not int:
                    if value is CAPTURED:
                        value = next(captured)
                    elif isinstance(value, Deferred):
                        value = next(deferred)
                        if value is None:
                            continue
                    elif is_tensor(value):  # captured at the call, or a producer's
                        value = next(captured if type(needs_resolving) is Snapshot else resolved)
                    else:
                        value = plain_number(value)
            values[name] = value
    return [record for record in records if record.values]
