"""The alert engine: rules on the monitor's background stream, the stall watchdog, delivery.

:func:`build_alerts` turns ``config.alerts`` into an :class:`AlertSystem` (or None when there
are no rules); the :class:`~trainmon.monitor.Monitor` starts it and closes it. On the rank that
writes, an :class:`AlertEngine` watches the pipeline as an
:class:`~trainmon.core.pipeline.Observer`; on every rank a
:class:`~trainmon.alerts.watchdog.StallWatchdog` watches the training thread's progress.

Where each metric rule looks (see :mod:`trainmon.alerts.rules` for the kinds):

* **Per step** (``Observer.on_records``): a rule whose metric is logged per step is evaluated
  on each logged value.
* **Per window** (``Observer.on_window``): ``growth`` rules, on the window mean; and any other
  rule whose metric never came in a per-step record: the cross-rank statistics
  (``perf/straggler_ratio``, ``<name>/max``, ...) exist only at a window's end — the pipeline
  writes them straight to the writers and merges them into the window, so ``on_records``
  never sees them. Such a rule is evaluated on the window's value at its last step.

No value is judged twice: a metric counts as per-step from the first time it comes in a
per-step record, and only metrics that never did are read from windows. Because the pipeline
may hand over a window before the per-step records of the same batch, a window is evaluated
only once the records up to its last step have been seen (at once in the usual case, else at
the end of the next ``on_records``).

Each alert goes, in this order, to a stop request (``"action": "stop"``, firing only), to the
sinks (``trainmon.alerts.sinks.build_dispatcher``: queued for the sinks' own threads; only on
ranks that write), and to the
``on_alert(alert)`` hook of every callback added with ``Monitor.add_callback`` — called on
the thread that raised the alert (the pipeline's thread for rules, the watchdog's for stalls).
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainmon.alerts.rules import SUPPRESSED, AlertTracker, Condition, build_condition
from trainmon.alerts.watchdog import StallWatchdog
from trainmon.collect.layer_stats import LayerHistory, explained
from trainmon.config import AlertRuleConfig, TrainmonConfig
from trainmon.core.aggregate import WindowStats
from trainmon.core.alert import Alert
from trainmon.core.events import StepScalars
from trainmon.core.observer import Observer
from trainmon.core.place import ProcessPlace, logging_rank, writes_on_rank
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

__all__ = [
    "ALERT_METRIC_PREFIX",
    "AlertEngine",
    "AlertRouter",
    "AlertSystem",
    "Dispatcher",
    "build_alerts",
]

_log = get_logger("alerts")

ALERT_METRIC_PREFIX = "alerts/"
"""Every rule writes ``alerts/<name>``: 1 at each firing alert, 0 when resolved."""
DISPATCH_CLOSE_TIMEOUT_S = 10.0


class Dispatcher(Protocol):
    """What the sinks module's ``build_dispatcher`` returns: ``submit`` never blocks."""

    def submit(self, alert: Alert) -> None: ...

    def close(self, timeout: float = ...) -> None: ...


def build_dispatcher(
    sinks: Sequence[Mapping[str, Any]], *, run_dir: Path | None, job: str, rank: int
) -> Dispatcher:
    """The sinks' dispatcher for ``alerts.sinks`` (imported here, when there are rules)."""
    from trainmon.alerts.sinks import build_dispatcher as build_sinks

    return build_sinks(list(sinks), run_dir=run_dir, job=job, rank=rank)


class AlertRouter:
    """Sends an alert where it goes: stop request, sinks, then the callbacks' ``on_alert``."""

    def __init__(self, dispatcher: Dispatcher | None, monitor: MonitorHandle | None = None) -> None:
        self.dispatcher = dispatcher
        self._monitor: Callable[[], MonitorHandle | None] = (
            weakref.ref(monitor) if monitor is not None else lambda: None
        )
        self._reported_callbacks: set[int] = set()

    def send(self, alert: Alert, rule: AlertRuleConfig) -> None:
        """Route one alert; never raises (a failing callback is reported once)."""
        monitor = self._monitor()
        if monitor is not None and rule.action == "stop" and alert.state == "firing":
            monitor.request_stop(f"alert rule {rule.name!r}: {alert.message}")
        if SUPPRESSED in alert.details:
            return  # a re-fire within the cool-down: it stops and is counted, not notified
        if self.dispatcher is not None:
            try:
                self.dispatcher.submit(alert)
            except Exception:
                _log.warning(
                    "alert %r could not be queued for the sinks", alert.rule, exc_info=True
                )
        for callback in monitor.callbacks if monitor is not None else ():
            try:
                callback.on_alert(alert)
            except Exception:
                if id(callback) not in self._reported_callbacks:
                    self._reported_callbacks.add(id(callback))
                    _log.warning(
                        "%r.on_alert failed; its later failures are not printed",
                        callback,
                        exc_info=True,
                    )


class _Watch:
    """One metric rule: its condition and the tracker that turns verdicts into alerts."""

    __slots__ = ("condition", "rule", "tracker")

    def __init__(self, rule: AlertRuleConfig, tracker: AlertTracker) -> None:
        self.rule = rule
        self.condition: Condition = build_condition(rule)
        self.tracker = tracker


class AlertEngine(Observer):
    """Evaluates the metric rules on the pipeline's background thread (see the module doc)."""

    def __init__(
        self,
        rules: Sequence[AlertRuleConfig],
        send: Callable[[Alert, AlertRuleConfig], None],
        *,
        job: str = "",
        rank: int = 0,
        clock: Callable[[], float] | None = None,
        window_steps: int = 1,
    ) -> None:
        self._send = send
        self.watches = [
            _Watch(
                rule,
                AlertTracker(rule, job=job, rank=rank, clock=clock, window_steps=window_steps),
            )
            for rule in rules
            if rule.kind != "stall"
        ]
        self._by_metric: dict[str, list[_Watch]] = {}
        for watch in self.watches:
            if watch.rule.kind != "growth":
                self._by_metric.setdefault(watch.rule.metric or "", []).append(watch)
        self._growth = [w for w in self.watches if w.rule.kind == "growth"]
        self._per_step: set[str] = set()
        self._layers: LayerHistory | None = None
        self._seen_through = -math.inf
        self._pending: deque[WindowStats] = deque()

    def explain_with_layers(self) -> None:
        """From now on, firing spike/growth/non_finite alerts name the module groups whose
        gradient norm moved most (``layers/*/grad_norm``, see
        :mod:`trainmon.collect.layer_stats`)."""
        if self._layers is None:
            self._layers = LayerHistory()

    # ---- Observer hooks (pipeline thread) ---------------------------------------------------

    def on_records(self, records: Sequence[StepScalars]) -> Sequence[StepScalars]:
        """Judge every watched metric in these per-step records; then any window waiting."""
        if self._layers is not None:
            self._layers.feed(records)
        out: list[StepScalars] = []
        by_metric = self._by_metric
        per_step = self._per_step
        seen = self._seen_through
        for record in records:
            values = record.values
            for metric, watches in by_metric.items():
                value = values.get(metric)
                if value is None:
                    continue
                if metric not in per_step:
                    per_step.add(metric)
                for watch in watches:
                    self._judge(watch, float(value), record.step, record.wall_time, out)
            if record.step > seen:
                seen = record.step
        self._seen_through = seen
        self._judge_windows(out, force=False)
        return out

    def on_window(self, window: WindowStats) -> Sequence[StepScalars]:
        """Judge growth rules and window-only metrics, once this window's records were seen."""
        self._pending.append(window)
        out: list[StepScalars] = []
        self._judge_windows(out, force=False)
        return out

    def close(self) -> None:
        """Judge any window still waiting (its alerts are sent, not written as metrics)."""
        self._judge_windows([], force=True)

    # ---- checkpoints (pipeline thread) -------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Each rule's condition (baselines) and tracker (firing or not), by rule name, and the
        metrics known to be logged per step. Call it on the pipeline's thread."""
        return {
            "rules": {
                w.rule.name: {
                    "condition": w.condition.state_dict(),
                    "alert": w.tracker.state_dict(),
                }
                for w in self.watches
            },
            "per_step_metrics": sorted(self._per_step),
        }

    def load_state_dict(self, state: Mapping[str, Any], resume_step: int) -> None:
        """Take back :meth:`state_dict`'s mapping, for a run that logs again from
        ``resume_step``; rules that are new in the config start afresh, rules no longer in it
        are ignored. Call it on the pipeline's thread."""
        rules = state.get("rules", {})
        if not isinstance(rules, Mapping):
            raise ValueError(f"alerts state 'rules' = {rules!r:.80}: expected a mapping")
        for watch in self.watches:
            saved = rules.get(watch.rule.name)
            if isinstance(saved, Mapping):
                watch.condition.load_state_dict(saved.get("condition") or {})
                watch.tracker.load_state_dict(saved.get("alert") or {})
        per_step = state.get("per_step_metrics", ())
        self._per_step = {name for name in per_step if isinstance(name, str)}
        self._seen_through = resume_step - 1
        self._pending.clear()

    # ---- evaluation -------------------------------------------------------------------------

    @property
    def firing(self) -> list[Alert]:
        """The alerts firing now."""
        return [w.tracker.active for w in self.watches if w.tracker.active is not None]

    def _judge_windows(self, out: list[StepScalars], *, force: bool) -> None:
        pending = self._pending
        while pending and (force or pending[0].last_step <= self._seen_through):
            window = pending.popleft()
            metrics = window.metrics
            for watch in self._growth:
                stats = metrics.get(watch.rule.metric or "")
                if stats is not None:
                    self._judge(watch, stats.mean, window.last_step, window.end_time, out)
            for metric, watches in self._by_metric.items():
                stats = metrics.get(metric)
                if stats is None or metric in self._per_step:
                    continue
                for watch in watches:
                    self._judge(watch, float(stats.mean), window.last_step, window.end_time, out)

    def _judge(
        self, watch: _Watch, value: float, step: int, when: float, out: list[StepScalars]
    ) -> None:
        verdict = watch.condition.check(value, step)
        alert = watch.tracker.update(verdict, value=value, step=step, when=when)
        if alert is None:
            return
        if (
            self._layers is not None
            and alert.state == "firing"
            and watch.rule.kind in _EXPLAINED_KINDS
        ):
            found = explained(alert.message, alert.details, self._layers)
            if found is not None:
                alert = dataclasses.replace(alert, message=found[0], details=found[1])
        flag = 1 if alert.state == "firing" else 0
        out.append(StepScalars(step, when, {ALERT_METRIC_PREFIX + watch.rule.name: flag}))
        self._send(alert, watch.rule)


#: Rule kinds whose firing alerts name the layers that moved most (when layers are watched).
_EXPLAINED_KINDS = frozenset({"spike", "growth", "non_finite"})


class AlertSystem:
    """What ``Monitor.alerts`` holds: the rule engine (ranks that write), the stall watchdog
    (every rank) and the delivery; built by :func:`build_alerts`, started by the monitor."""

    def __init__(
        self,
        rules: Sequence[AlertRuleConfig],
        *,
        dispatcher: Dispatcher | None,
        evaluates: bool,
        run_dir: Path,
        job: str,
        rank: int,
        window_steps: int = 1,
    ) -> None:
        self.rules = tuple(rules)
        self.window_steps = window_steps
        """Steps per window: how long a per-step rule's condition must stay clear to resolve
        (unless the rule sets resolve_after)."""
        self.dispatcher = dispatcher
        self.run_dir = run_dir
        """Where stack files go: the run folder (see :func:`trainmon.writers.run_identity`),
        else the current directory."""
        self.job = job
        self.rank = rank
        self._evaluates = evaluates
        self.engine: AlertEngine | None = None
        self.watchdog: StallWatchdog | None = None
        self._closed = False

    def start(self, monitor: MonitorHandle) -> None:
        """Watch ``monitor``: rules on its pipeline, the watchdog on its training thread."""
        router = AlertRouter(self.dispatcher, monitor)
        metric_rules = [r for r in self.rules if r.kind != "stall"]
        if self._evaluates and metric_rules:
            self.engine = AlertEngine(
                metric_rules,
                router.send,
                job=self.job,
                rank=self.rank,
                window_steps=self.window_steps,
            )
            monitor.add_observer(self.engine)
        stall_rules = [r for r in self.rules if r.kind == "stall"]
        if stall_rules:
            self.watchdog = StallWatchdog(
                stall_rules,
                progress=_progress_of(monitor),
                stack_dir=self.run_dir,
                send=router.send,
                delivers=self.dispatcher is not None,
                write_metric=_metric_writer(monitor) if self._evaluates else None,
                job=self.job,
                rank=self.rank,
                world_size=monitor.place.world_size,
            )
            self.watchdog.start()

    def state_dict(self) -> dict[str, Any]:
        """The metric rules' state (see :meth:`AlertEngine.state_dict`); empty on ranks that
        do not evaluate rules. The stall watchdog keeps none: it learns the pace again."""
        return self.engine.state_dict() if self.engine is not None else {}

    def load_state_dict(self, state: Mapping[str, Any], resume_step: int) -> None:
        """Take back :meth:`state_dict`'s mapping (see :meth:`AlertEngine.load_state_dict`)."""
        if self.engine is not None and state:
            self.engine.load_state_dict(state, resume_step)

    def explain_with_layers(self) -> None:
        """Let the rule engine name the layers that moved most (see
        :meth:`AlertEngine.explain_with_layers`); nothing on ranks that do not evaluate."""
        if self.engine is not None:
            self.engine.explain_with_layers()

    @property
    def firing(self) -> list[Alert]:
        """The alerts firing now, from rules and from the stall watchdog."""
        engine = self.engine.firing if self.engine is not None else []
        return engine + (self.watchdog.firing if self.watchdog is not None else [])

    def close(self, timeout: float = DISPATCH_CLOSE_TIMEOUT_S) -> dict[str, int]:
        """Stop the watchdog and deliver what is queued, all within ``timeout`` s. Returns
        ``{"alert sink <name>": alerts not delivered}`` for sinks that lost any. Idempotent."""
        if self._closed:
            return {}
        self._closed = True
        deadline = time.monotonic() + timeout
        if self.watchdog is not None:
            self.watchdog.stop(min(5.0, timeout))
        if self.dispatcher is None:
            return {}
        try:
            self.dispatcher.close(max(0.0, deadline - time.monotonic()))
        except Exception:
            _log.warning("closing the alert sinks failed", exc_info=True)
            return {}
        undelivered = getattr(self.dispatcher, "undelivered", None)
        lost = undelivered() if callable(undelivered) else {}
        return {f"alert sink {name}": count for name, count in lost.items() if count}


def _progress_of(monitor: MonitorHandle) -> Callable[[], tuple[int, int]]:
    """:meth:`Monitor.progress` without keeping the monitor alive: the watchdog thread must not
    stop a dropped monitor from being collected (it then sees no progress, and stops anyway)."""
    ref = weakref.ref(monitor)
    last = monitor.progress()

    def progress() -> tuple[int, int]:
        nonlocal last
        current = ref()
        if current is not None:
            last = current.progress()
        return last

    return progress


def _metric_writer(monitor: MonitorHandle) -> Callable[[str, float, int], None]:
    """Queue ``alerts/<name>`` from the watchdog's thread (the pipeline then writes it)."""
    ref = weakref.ref(monitor)

    def write(name: str, value: float, step: int) -> None:
        current = ref()
        if current is not None:
            current.write_events([(name, value, step)])

    return write


def build_alerts(config: TrainmonConfig, place: ProcessPlace) -> AlertSystem | None:
    """The alert system for ``config.alerts`` on this process, or None without rules.

    Rules and sinks are checked here (start-up); nothing watches anything until
    :meth:`AlertSystem.start`. Metric rules and delivery exist on ranks that write; stall
    rules on every rank.
    """
    rules = config.alerts.rule_configs()
    if not rules:
        return None
    log_rank = logging_rank(config.trainmon.log_rank, place)
    evaluates = writes_on_rank(place, config.trainmon.per_rank_output, log_rank)
    from trainmon.writers import run_identity

    identity = run_identity(config, place)
    run_dir, job = identity.run_dir, identity.name
    dispatcher = None
    if evaluates:
        dispatcher = build_dispatcher(
            config.alerts.sinks, run_dir=run_dir, job=job, rank=place.rank
        )
    return AlertSystem(
        rules,
        dispatcher=dispatcher,
        evaluates=evaluates,
        run_dir=(run_dir if run_dir is not None else Path.cwd()).absolute(),
        job=job,
        rank=place.rank,
        window_steps=config.trainmon.window_steps or config.steps_per_print,
    )
