"""What makes one run read the same from any of its folders (journal, TensorBoard, CSV).

A TensorBoard or CSV folder has no ``alerts.jsonl`` and may mix x axes (DeepSpeed's
``Train/Samples/*`` count samples); the journal has neither problem. So the counts that every
reader shows are settled here, once, from what all folders hold: alerts from the
``alerts/<rule>`` series every writer gets (1 at a firing, 0 at a resolve), and step counts
from step-axis series only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmon.report.model import Run, Series

ALERT_SERIES_PREFIX = "alerts/"


def alerts_from_edges(series: Mapping[str, Series]) -> list[dict[str, Any]]:
    """Alert records rebuilt from ``alerts/<rule>`` series: a firing where the value rises to
    1, a resolve where it falls back to 0; in step order."""
    found: list[dict[str, Any]] = []
    for name, metric in series.items():
        if not name.startswith(ALERT_SERIES_PREFIX) or metric.x_unit != "step":
            continue
        rule = name[len(ALERT_SERIES_PREFIX) :]
        firing = False
        for step, value in zip(metric.steps, metric.values, strict=True):
            now = value >= 0.5
            if now != firing:
                state = "firing" if now else "resolved"
                found.append(
                    {
                        "rule": rule,
                        "state": state,
                        "step": step,
                        "message": f"{name} = {value:g} (from the {name} series)",
                    }
                )
                firing = now
    found.sort(key=lambda alert: alert["step"])
    return found


def step_axis(series: Mapping[str, Series]) -> dict[str, Series]:
    """The series on the training-step axis (all of them when none says otherwise)."""
    steps = {name: s for name, s in series.items() if s.x_unit == "step"}
    return steps or dict(series)


def distinct_steps(series: Mapping[str, Series]) -> int:
    """How many steps logged something (cheap when every metric has the same steps)."""
    lists = [s.steps for s in series.values()]
    if not lists:
        return 0
    if all(steps == lists[0] for steps in lists[1:]):
        return len(lists[0])
    return len(set().union(*lists))


def settle(run: Run) -> Run:
    """``run`` with its alerts derived from edges where the folder holds no alert records, and
    its step count taken from step-axis series only."""
    if not run.alerts:
        run.alerts = alerts_from_edges(run.series)
    on_steps = step_axis(run.series)
    if len(on_steps) < len(run.series):
        run.step_count = len(set().union(*(s.steps for s in on_steps.values())))
    return run
