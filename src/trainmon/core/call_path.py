"""The training thread's fast path past the checks: how a checked call is queued.

Why apart from the Monitor: what a call of tensors becomes in the queue (its names and a key
of the capture store, or its items and a :class:`Snapshot`) and the plain test of DeepSpeed's
side events are decisions of the queue's format, not of the Monitor's API; they stay a few
C calls, since every call with tensors runs them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from trainmon.core.values import INT64_MAX, INT64_MIN, Snapshot, capture

if TYPE_CHECKING:
    from trainmon.core.pipeline import Pipeline


def plain_side_items(items: Sequence[Any], names: set[str]) -> bool:
    """True when every side event is a ``(name, number, step)`` triple of a known name, a
    plain float or int64 and an int64 step: the fast path of ``write_side_events``."""
    try:
        for item in items:
            value = item[1]
            kind = type(value)
            if (
                len(item) != 3
                or item[0] not in names
                or (kind is not float and (kind is not int or not INT64_MIN <= value <= INT64_MAX))
                or type(item[2]) is not int
                or not INT64_MIN <= item[2] <= INT64_MAX
            ):
                return False
    except (TypeError, IndexError, KeyError):
        return False
    return True


def require_side_steps(items: Sequence[Any]) -> None:
    """Raise for a side event without its own step (they have no default step)."""
    for item in items:
        if isinstance(item, (tuple, list)) and (len(item) != 3 or item[2] is None):
            raise TypeError(
                f"write_side_events: event {item!r} has no step; expected (name, value, step) "
                f"with the step on the events' own axis"
            )


_first, _third = itemgetter(0), itemgetter(2)


def put_captured_call(
    pipeline: Pipeline, items: Sequence[Any], tensors: list[Any], step: int, pairs: bool
) -> None:
    """Queue a checked call whose values are all tensors (``pairs``: no item has a step of its
    own). Logged at one step (the default ``step`` for pairs) it travels as its names alone (see
    :data:`~trainmon.core.entries.Entry`), its one CPU copy in the pipeline's capture store;
    otherwise as its items with a :class:`Snapshot`."""
    copy = capture(tensors, bare_cpu=True)
    whole: int | None = step
    if not pairs:  # triples of one step (a loop's ``(name, t, k)``), or each item at its own
        steps = set(map(_third, items)) if len(set(map(len, items))) == 1 else ()
        whole = steps.pop() if len(steps) == 1 else None
    if whole is None:
        snapshot = copy if type(copy) is Snapshot else Snapshot(len(tensors), copy)
        pipeline.put((time.time(), step, items, snapshot), len(items))
    elif type(copy) is Snapshot:  # on an accelerator, or of several dtypes
        pipeline.put((time.time(), whole, tuple(map(_first, items)), copy), len(items))
    else:
        pipeline.put_captured(time.time(), whole, tuple(map(_first, items)), copy)
