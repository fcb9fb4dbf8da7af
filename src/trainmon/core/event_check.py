"""The full check of logged events, off the fast path: messages that name the metric.

Why apart from the Monitor: the fast path (known names, plain numbers, int steps) is a few
type tests on the training thread; everything else (first sight of a name, ``None`` values,
numpy scalars, tensors as steps) comes here once per call, and the messages it raises are
what a user reads when a call is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainmon.core.entries import Item
from trainmon.core.values import (
    CAPTURED,
    INT64_MAX,
    INT64_MIN,
    Deferred,
    Snapshot,
    capture,
    check_encodable,
    check_step,
    check_value,
    is_tensor,
    plain_number,
)
from trainmon.logging import get_logger

_log = get_logger("monitor")
#: names remembered as checked; past this many, new names are checked at every call
MAX_CACHED_NAMES = 100_000


class EventChecker:
    """Checks names, values and steps of ``write_events`` calls; remembers checked names
    (:attr:`names`, what the fast path looks up) and which names were ``None`` (said once)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._warned_none: set[str] = set()

    def check(self, items: Sequence[Any]) -> tuple[list[Item], bool | Snapshot]:
        """Full check with messages that name the metric; drops ``None`` values with a notice.

        Returns new tuples (nothing of the caller's is kept but immutable numbers, names and
        :class:`Deferred` values) and the entry's ``needs_resolving``: the :class:`Snapshot` of
        the call's tensors, True when :class:`Deferred` values need resolving, else False.
        """
        kept: list[Item] = []
        tensors: list[Any] = []
        tensor_names: list[str] = []
        deferred = False
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise TypeError(
                    f"write_events: each event must be a (name, value) or (name, value, step) "
                    f"tuple, got {item!r}"
                )
            name = item[0]
            value = item[1]
            step = item[2] if len(item) == 3 else None
            if type(name) is not str or name not in self.names:
                self.check_name(name)
            if step is not None and (type(step) is not int or not INT64_MIN <= step <= INT64_MAX):
                step = check_step(step, f"metric {name!r}")
                if is_tensor(step):
                    tensors.append(step)
                    tensor_names.append(name)
                    step = CAPTURED
            kind = type(value)
            if kind is float or (kind is int and INT64_MIN <= value <= INT64_MAX):
                pass
            elif is_tensor(value):  # checked by capture(), on the stacked copy when it can
                tensors.append(value)
                tensor_names.append(name)
                value = CAPTURED
            else:
                if not check_value(name, value):
                    if name not in self._warned_none:
                        self._warned_none.add(name)
                        _log.info(
                            "metric %r has no value yet (None); skipped until it has one", name
                        )
                    if step is CAPTURED:
                        tensors.pop()
                        tensor_names.pop()
                    continue
                if isinstance(value, Deferred):
                    deferred = True
                else:
                    value = plain_number(value)
            kept.append((name, value) if step is None else (name, value, step))
        if tensors:
            return kept, capture(tensors, tensor_names)
        return kept, deferred

    def check_name(self, name: Any) -> None:
        """Raise naming ``name`` unless it is a non-empty, encodable string; remember it."""
        if type(name) is not str:
            raise TypeError(f"metric name {name!r}: expected a non-empty string")
        if not name:
            raise ValueError(
                "metric name is empty: expected a non-empty string such as 'train/loss'"
            )
        if not name.isascii():
            check_encodable(name)
        if len(self.names) < MAX_CACHED_NAMES:
            self.names.add(name)


def checked_record_step(step: Any, where: str) -> int:
    """A step for a histogram or text record: a plain int (a device tensor is read here, as
    these records are rare)."""
    checked = check_step(step, where)
    return checked if isinstance(checked, int) else int(checked)
