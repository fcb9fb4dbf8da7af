"""What an alert is, shared by the rules that raise it and the sinks that deliver it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

State = Literal["firing", "resolved"]

ALERTS_FILE = "alerts.jsonl"
"""The file sink's default file in the run folder, one :meth:`Alert.as_dict` line per alert
(read back by ``summary``, ``report`` and ``tail``)."""


@dataclass(frozen=True)
class Alert:
    """One change of an alert rule's condition: it started (``firing``, also sent again after
    the cool-down while it lasts) or it ended (``resolved``)."""

    rule: str
    """The rule's name, e.g. ``"grad-explosion"``."""
    kind: str
    """threshold, non_finite, spike, drop, growth or stall."""
    state: State
    message: str
    """One human sentence: what happened, with the value and the step."""
    metric: str | None = None
    value: float | None = None
    step: int | None = None
    time: float = 0.0
    """Unix time at which the condition was seen."""
    severity: Literal["info", "warning", "critical"] = "warning"
    job: str = ""
    rank: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    """Extra facts for the reader, e.g. the baseline of a spike or the stack file of a stall."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (the ``alerts.jsonl`` line and the generic webhook body)."""
        return {
            "rule": self.rule,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
            "metric": self.metric,
            "value": self.value,
            "step": self.step,
            "time": self.time,
            "severity": self.severity,
            "job": self.job,
            "rank": self.rank,
            "labels": dict(self.labels),
            "details": dict(self.details),
        }
