"""Alert rules: one :class:`Condition` per kind judging each value, and the small state
machine (:class:`AlertTracker`) that turns verdicts into firing / repeated / resolved alerts.

Conditions are pure (value in, :class:`Verdict` out) so that the engine can run them per step
or per window alike; baselines exclude the values that met a ``spike``/``drop`` condition, so
a lasting change stays an alert instead of becoming the new normal. The schema and the
semantics users rely on are in the README ("Alerts and callbacks").
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
import operator
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmon.config import AlertRuleConfig
from trainmon.core.alert import Alert

__all__ = [
    "AlertTracker",
    "BaselineCondition",
    "Condition",
    "GrowthCondition",
    "NonFiniteCondition",
    "ThresholdCondition",
    "Verdict",
    "build_condition",
    "format_number",
]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def format_number(value: float) -> str:
    """A value as people read it in an alert: 4 significant digits, NaN and ±Inf spelled out."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


@dataclass(frozen=True)
class Verdict:
    """A condition's judgement of one value: whether it holds, in words, with the facts."""

    met: bool
    text: str
    """One clause with the metric, value and step, e.g. ``train/loss = NaN at step 12``."""
    details: Mapping[str, Any] = field(default_factory=dict)


class Condition(abc.ABC):
    """Judges one value of a metric (or one window mean, for ``growth``)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric

    @abc.abstractmethod
    def check(self, value: float, step: int) -> Verdict | None:
        """The verdict on ``value`` logged at ``step``; None when it says nothing either way."""

    def state_dict(self) -> dict[str, Any]:
        """What the condition remembers (baselines), JSON-serialisable, for a checkpoint."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional
        """Take back what :meth:`state_dict` returned (stateless conditions ignore it)."""

    def _at(self, value: float, step: int) -> str:
        return f"{self.metric} = {format_number(value)} at step {step}"


class ThresholdCondition(Condition):
    """``value <op> threshold``; NaN is skipped (a ``non_finite`` rule catches it)."""

    def __init__(self, metric: str, op: str, threshold: float) -> None:
        super().__init__(metric)
        self.op = op
        self.threshold = threshold
        self._compare = _OPS[op]

    def check(self, value: float, step: int) -> Verdict | None:
        if value != value:
            return None
        limit = f"{self.op} {format_number(self.threshold)}"
        met = self._compare(value, self.threshold)
        text = (
            f"{self._at(value, step)}, {limit}" if met else f"{self._at(value, step)}, not {limit}"
        )
        return Verdict(met, text, {"op": self.op, "threshold": self.threshold})


class NonFiniteCondition(Condition):
    """The value is NaN, +Inf or -Inf."""

    def check(self, value: float, step: int) -> Verdict:
        met = value - value != 0
        text = f"{self._at(value, step)}, {'not' if met else 'again'} a finite number"
        return Verdict(met, text)


class BaselineCondition(Condition):
    """``spike`` (value above ``factor`` x baseline) or ``drop`` (value more than ``percent`` %
    below baseline), the baseline being the median or mean of the last ``window`` values that
    did not meet the condition."""

    def __init__(
        self,
        metric: str,
        kind: str,
        *,
        window: int,
        baseline: str,
        min_samples: int,
        factor: float | None = None,
        percent: float | None = None,
    ) -> None:
        super().__init__(metric)
        self.kind = kind
        self.baseline = baseline
        self.min_samples = min_samples
        self.factor = factor
        self.percent = percent
        self._values: deque[float] = deque(maxlen=window)
        self._average: Callable[[deque[float]], float] = (
            statistics.median if baseline == "median" else statistics.fmean
        )

    def check(self, value: float, step: int) -> Verdict | None:
        if value - value != 0:
            return None  # NaN/Inf says nothing about a spike; it stays out of the baseline
        history = self._values
        if len(history) < self.min_samples:
            history.append(value)
            return None
        base = self._average(history)
        of = f"its {self.baseline} of the last {len(history)} values ({format_number(base)})"
        facts: dict[str, Any] = {"baseline": base, "baseline_kind": self.baseline}
        if self.kind == "spike":
            factor = self.factor or 0.0
            ratio = value / base if base > 0 else math.nan
            met = base > 0 and value > factor * base
            facts.update(factor=factor, ratio=ratio)
            how = f"{format_number(ratio)} x {of}"
            limit = f"{'above' if met else 'within'} {format_number(factor)} x"
        else:
            percent = self.percent or 0.0
            below = (1.0 - value / base) * 100.0 if base > 0 else math.nan
            met = base > 0 and below > percent
            facts.update(percent=percent, below_percent=below)
            how = f"{format_number(below)}% below {of}"
            limit = f"{'more than' if met else 'within'} {format_number(percent)}%"
        if not met:
            history.append(value)
        return Verdict(met, f"{self._at(value, step)}, {how}: {limit}", facts)

    def state_dict(self) -> dict[str, Any]:
        """The baseline's values, oldest first."""
        return {"values": list(self._values)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Refill the baseline (its newest ``window`` values when the window shrank)."""
        self._values.clear()
        self._values.extend(_floats(state.get("values", ()), "values"))


class GrowthCondition(Condition):
    """The window mean rose in each of the last ``windows`` consecutive windows."""

    def __init__(self, metric: str, windows: int) -> None:
        super().__init__(metric)
        self.windows = windows
        self._means: deque[float] = deque(maxlen=windows + 1)

    def check(self, value: float, step: int) -> Verdict | None:
        means = self._means
        means.append(value)
        if len(means) <= self.windows:
            return None
        rising = all(later > earlier for earlier, later in itertools.pairwise(means))
        trail = ", ".join(format_number(m) for m in means)
        if rising:
            text = (
                f"{self.metric} window mean rose in each of the last {self.windows} windows "
                f"({trail}), to {format_number(value)} at step {step}"
            )
        else:
            text = f"{self.metric} window mean {format_number(value)} at step {step} stopped rising"
        return Verdict(rising, text, {"window_means": list(means)})

    def state_dict(self) -> dict[str, Any]:
        """The last window means, oldest first."""
        return {"means": list(self._means)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back the last window means."""
        self._means.clear()
        self._means.extend(_floats(state.get("means", ()), "means"))


def _floats(values: Any, key: str) -> list[float]:
    """A saved list of numbers, checked (a checkpoint is input like any other)."""
    if not isinstance(values, (list, tuple)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        raise ValueError(f"alert rule state {key!r} = {values!r:.80}: expected a list of numbers")
    return [float(v) for v in values]


def build_condition(rule: AlertRuleConfig) -> Condition:
    """The condition of a metric rule (every kind but ``stall``)."""
    metric = rule.metric or ""
    if rule.kind == "threshold":
        return ThresholdCondition(metric, rule.op or ">", float(rule.threshold or 0.0))
    if rule.kind == "non_finite":
        return NonFiniteCondition(metric)
    if rule.kind in ("spike", "drop"):
        return BaselineCondition(
            metric,
            rule.kind,
            window=rule.window,
            baseline=rule.baseline,
            min_samples=rule.min_samples or min(10, rule.window),
            factor=rule.factor,
            percent=rule.percent,
        )
    if rule.kind == "growth":
        return GrowthCondition(metric, rule.windows)
    raise ValueError(f"rule {rule.name!r}: kind {rule.kind!r} has no metric condition")


#: ``Alert.details`` key of an alert the tracker decided not to notify (a re-fire within the
#: cool-down, or the resolve of one): it still stops training and sets ``alerts/<rule>``.
SUPPRESSED = "suppressed"


class AlertTracker:
    """Turns one rule's verdicts into alerts, as Alertmanager users expect (pending → firing →
    resolved): ``firing`` once the condition has held for ``for_steps`` verdicts in a row,
    again after ``cooldown_s`` while it lasts; ``resolved`` once it has been clear for
    ``resolve_after`` verdicts (and ``resolve_after_s`` seconds); a re-fire within
    ``cooldown_s`` of the last firing notification comes back marked :data:`SUPPRESSED`.
    Seconds are counted on the judged values' own times (``when``), so how late the
    background judges them does not matter; a ``clock`` given counts them when judged
    instead (the stall watchdog, tests). Not thread-safe: one thread feeds it."""

    def __init__(
        self,
        rule: AlertRuleConfig,
        *,
        job: str = "",
        rank: int = 0,
        clock: Callable[[], float] | None = None,
        window_steps: int = 1,
    ) -> None:
        self.rule = rule
        self.job = job
        self.rank = rank
        self._judge_clock = clock
        self.clock: Callable[[], float] = clock or time.time
        """Now, on the scale the seconds are counted on (wall time unless a clock is given)."""
        self.active: Alert | None = None
        """The alert that is firing now, or None."""
        per_step = rule.kind not in ("growth", "stall")
        default = window_steps if per_step else 1
        self.resolve_after = rule.resolve_after if rule.resolve_after is not None else default
        self._streak = 0
        self._sent_at = 0.0
        self._repeats = 0
        self._clear = 0
        self._clear_since: float | None = None
        self._fired_at: float | None = None
        self._quiet = False
        #: alerts not notified (re-fires within the cool-down and their resolves)
        self.suppressed = 0

    @property
    def firing(self) -> bool:
        """True while the condition lasts (from the first ``firing`` to the ``resolved``)."""
        return self.active is not None

    def state_dict(self) -> dict[str, Any]:
        """Whether the rule is firing (the alert, as :meth:`Alert.as_dict`), its streak of met
        verdicts, and the cool-down's progress: what a resumed run needs so that a firing
        alert is neither sent again as new nor forgotten (its ``resolved`` still comes)."""
        now = self.clock()
        return {
            "active": self.active.as_dict() if self.active is not None else None,
            "streak": self._streak,
            "repeats": self._repeats,
            "since_sent_s": now - self._sent_at if self.active is not None else None,
            "clear": self._clear,
            "quiet": self._quiet,
            "since_fired_s": now - self._fired_at if self._fired_at is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned."""
        active = state.get("active")
        streak = state.get("streak", 0)
        repeats = state.get("repeats", 0)
        if type(streak) is not int or type(repeats) is not int:
            raise ValueError(
                f"alert rule {self.rule.name!r} state: streak {streak!r} and repeats "
                f"{repeats!r} must be integers"
            )
        if active is not None and not isinstance(active, Mapping):
            raise ValueError(
                f"alert rule {self.rule.name!r} state: active = {active!r:.80}: expected the "
                f"firing alert as a mapping, or null"
            )
        self._streak = streak
        self._repeats = repeats
        self.active = _alert_from(active) if active is not None else None
        since = state.get("since_sent_s")
        now = self.clock()
        self._sent_at = now - (float(since) if isinstance(since, (int, float)) else 0.0)
        clear = state.get("clear", 0)
        self._clear = clear if type(clear) is int and clear >= 0 else 0
        self._clear_since = now if self._clear else None
        self._quiet = state.get("quiet") is True
        fired = state.get("since_fired_s")
        self._fired_at = now - float(fired) if isinstance(fired, (int, float)) else None

    def update(
        self, verdict: Verdict | None, *, value: float | None, step: int | None, when: float
    ) -> Alert | None:
        """Feed one verdict (None is ignored); return the alert to send, if any."""
        if verdict is None:
            return None
        rule = self.rule
        now = when if self._judge_clock is None else self._judge_clock()
        if not verdict.met:
            self._streak = 0
            if self.active is None:
                return None
            self._clear += 1
            if self._clear_since is None:
                self._clear_since = now
            if self._clear < self.resolve_after or now - self._clear_since < rule.resolve_after_s:
                return None  # still firing until it has been clear for a while (no flapping)
            self.active = None
            self._clear, self._clear_since = 0, None
            resolved = self._alert("resolved", verdict.text, verdict, value, step, when)
            quiet, self._quiet = self._quiet, False
            return self._suppress(resolved) if quiet else resolved
        self._clear, self._clear_since = 0, None
        self._streak += 1
        if self.active is None:
            if self._streak < rule.for_steps:
                return None
            text = verdict.text
            if rule.for_steps > 1:
                text += f", for {rule.for_steps} consecutive values"
            self._sent_at = now
            self._repeats = 0
            self.active = self._alert("firing", text, verdict, value, step, when)
            fired_at = self._fired_at
            self._quiet = fired_at is not None and now - fired_at < rule.cooldown_s
            if self._quiet:
                return self._suppress(self.active)
            self._fired_at = now
            return self.active
        if now - self._sent_at < rule.cooldown_s:
            return None
        self._sent_at = self._fired_at = now
        self._quiet = False  # past the cool-down: a lasting condition is notified again
        self._repeats += 1
        since = self.active.step
        message = f"still firing since step {since}: {verdict.text}"
        details = {"repeat": self._repeats, "since_step": since}
        return self._alert("firing", message, verdict, value, step, when, details)

    def _suppress(self, alert: Alert) -> Alert:
        """The same alert, marked as not to be notified (counted in :attr:`suppressed`)."""
        self.suppressed += 1
        reason = f"re-fired within cooldown_s ({self.rule.cooldown_s:g} s) of the last notice"
        return dataclasses.replace(alert, details={**alert.details, SUPPRESSED: reason})

    def _alert(
        self,
        state: str,
        message: str,
        verdict: Verdict,
        value: float | None,
        step: int | None,
        when: float,
        extra: Mapping[str, Any] | None = None,
    ) -> Alert:
        rule = self.rule
        details = dict(verdict.details)
        if extra:
            details.update(extra)
        return Alert(
            rule=rule.name,
            kind=rule.kind,
            state="firing" if state == "firing" else "resolved",
            message=message,
            metric=rule.metric,
            value=value,
            step=step,
            time=when,
            severity=rule.severity,
            job=self.job,
            rank=self.rank,
            labels=dict(rule.labels),
            details=details,
        )


def _alert_from(saved: Mapping[str, Any]) -> Alert:
    """An :class:`Alert` back from :meth:`Alert.as_dict`'s mapping."""
    fields = {
        "rule", "kind", "state", "message", "metric", "value", "step", "time", "severity",
        "job", "rank", "labels", "details",
    }  # fmt: skip
    return Alert(**{k: v for k, v in saved.items() if k in fields})
