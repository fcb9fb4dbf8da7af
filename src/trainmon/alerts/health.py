"""Built-in health checks: what a run must never do silently, with no rule configured.

DeepSpeed users get a console line when fp16 overflows; a NaN loss or gradient norm deserves at
least as much. The checks run on the background thread as a pipeline observer and only warn;
stopping is what ``non_finite`` rules with ``"action": "stop"`` are for. Also here: the
training-thread side of such stop rules, which judges plain Python floats at the call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainmon.alerts.rules import format_number
from trainmon.config import AlertRuleConfig
from trainmon.core.aggregate import WindowStats
from trainmon.core.events import StepScalars
from trainmon.core.observer import Observer
from trainmon.logging import get_logger

_log = get_logger("health")

#: The metrics the built-in checks watch: a non-finite value in either means the weights are
#: being (or are about to be) ruined.
HEALTH_METRICS = ("train/loss", "train/grad_norm")


class NonFiniteWarning(Observer):
    """Warn once per metric, naming it and the first step, when a watched metric is NaN or
    infinite (``alerts.health_checks``, on by default)."""

    def __init__(self, metrics: Iterable[str] = HEALTH_METRICS) -> None:
        self._unwarned = set(metrics)

    def on_records(self, records: Sequence[StepScalars]) -> Sequence[StepScalars]:
        """Look at the watched metrics of each step; warn at the first non-finite one."""
        unwarned = self._unwarned
        if not unwarned:
            return ()
        for record in records:
            values = record.values
            for metric in tuple(unwarned):
                value = values.get(metric)
                if value is not None and not math.isfinite(value):
                    unwarned.discard(metric)
                    _log.warning(
                        "%s is %s at step %d (its first non-finite value): training is "
                        'probably diverging; add a non_finite rule with "action": "stop" '
                        "to stop it (alerts.health_checks: false silences this check)",
                        metric,
                        value,
                        record.step,
                    )
        return ()

    def on_window(self, window: WindowStats) -> Sequence[StepScalars]:
        """Nothing to do per window."""
        return ()


def call_time_stops(rules: Iterable[AlertRuleConfig]) -> dict[str, str]:
    """``{metric: rule name}`` of the rules the training thread can judge at the call: a
    ``non_finite`` rule that stops at its first value (``for_steps`` 1)."""
    return {
        rule.metric: rule.name
        for rule in rules
        if rule.kind == "non_finite"
        and rule.action == "stop"
        and rule.for_steps == 1
        and rule.metric is not None
    }


def non_finite_float(items: Iterable[Any], watched: Mapping[str, str], step: int) -> str | None:
    """The stop reason (worded as the background rule words it) when one of ``items``
    (``(name, value[, step])`` tuples; ``step`` for pairs) gives a watched metric a NaN or
    infinite plain float, else None. Tensors are left to the background."""
    for item in items:
        if type(item) is not tuple or len(item) < 2:
            continue
        value = item[1]
        if type(value) is float and not math.isfinite(value):
            rule = watched.get(item[0])
            if rule is not None:
                at = item[2] if len(item) > 2 else step
                return (
                    f"alert rule {rule!r}: {item[0]} = {format_number(value)} at step {at}, "
                    "not a finite number"
                )
    return None
