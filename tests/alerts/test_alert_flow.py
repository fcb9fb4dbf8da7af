"""Alert rules on a real Monitor: what the callbacks, the alert file and the journal show."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.core.aggregate import WindowStats
from trainmon.core.alert import Alert
from trainmon.core.place import ProcessPlace


class Inbox:
    """A callback that keeps every alert it is given."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def on_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)


@dataclass
class Seen:
    """Everything a user can read back after a run."""

    alerts: list[Alert]
    """Given to the callback's on_alert."""
    metrics: dict[str, list[tuple[int, float]]]
    """``alerts/<name>`` (step, value) pairs from the JSONL journal."""
    filed: list[dict[str, Any]]
    """Lines of the file sink's alerts.jsonl (empty without the sinks module)."""
    journal: dict[str, dict[int, Any]]
    """Every metric's values by step, from the journal."""

    def transitions(self, rule: str) -> list[tuple[str, int | None]]:
        """(state, step) of the rule's alerts, in order."""
        return [(a.state, a.step) for a in self.alerts if a.rule == rule]


def config_for(tmp_path: Path, rules: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """JSONL into tmp_path/job, windows of 10 steps, the file sink when there is one; rules
    resolve at the first clear verdict unless they say otherwise (the flapping guard has
    tests of its own in test_flapping.py)."""
    rules = [{"resolve_after": 1, **rule} for rule in rules]
    config: dict[str, Any] = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "alerts": {"rules": rules, "sinks": [{"type": "file"}]},
    }
    config.update(extra)
    return config


def read_back(tmp_path: Path, inbox: Inbox) -> Seen:
    """What the run left in tmp_path/job."""
    journal: dict[str, dict[int, Any]] = {}
    for record in trainmon.read_journal(tmp_path / "job"):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                journal.setdefault(name, {})[record["step"]] = value
    metrics: dict[str, list[tuple[int, float]]] = {}
    for record in trainmon.read_journal(tmp_path / "job"):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                if name.startswith("alerts/"):
                    metrics.setdefault(name, []).append((record["step"], value))
    filed = []
    lines = (tmp_path / "job" / "alerts.jsonl").read_text().splitlines()
    filed = [json.loads(line) for line in lines if line.strip()]
    return Seen(inbox.alerts, metrics, filed, journal)


def run(
    tmp_path: Path,
    rules: list[dict[str, Any]],
    steps: Mapping[int, Mapping[str, float]],
    *,
    pause_s: float = 0.0,
    **extra: Any,
) -> Seen:
    """Log ``steps`` through a Monitor with ``rules``; return what it left behind."""
    inbox = Inbox()
    with trainmon.Monitor(config_for(tmp_path, rules, **extra)) as monitor:
        monitor.add_callback(inbox)
        for step, values in steps.items():
            monitor.step = step
            monitor.log(dict(values))
            if pause_s:
                time.sleep(pause_s)
    return read_back(tmp_path, inbox)


def assert_filed_like_callbacks(seen: Seen) -> None:
    """The file sink holds the same alerts, in the same order, as on_alert got."""
    got = [(a["rule"], a["state"], a["step"], a["message"]) for a in seen.filed]
    assert got == [(a.rule, a.state, a.step, a.message) for a in seen.alerts]


def test_threshold_fires_after_for_steps_and_resolves(tmp_path: Path) -> None:
    """grad_norm > 10 fires on the 3rd consecutive step above, resolves on the first below,
    and alerts/<name> is 1 then 0 at those steps in the journal."""
    norms = {s: 1.0 for s in range(1, 31)}
    norms.update({5: 12.0, 6: 13.0, 12: 11.0, 13: 15.0, 14: 20.0, 15: 30.0, 16: 2.0})
    rules = [{"name": "grad-explosion", "metric": "train/grad_norm", "op": ">", "threshold": 10.0}]
    rules[0]["for_steps"] = 3
    seen = run(tmp_path, rules, {s: {"train/grad_norm": v} for s, v in norms.items()})
    assert seen.transitions("grad-explosion") == [("firing", 14), ("resolved", 16)]
    firing, resolved = seen.alerts
    assert firing.message == "train/grad_norm = 20 at step 14, > 10, for 3 consecutive values"
    assert (firing.value, firing.metric, firing.job, firing.severity) == (
        20.0,
        "train/grad_norm",
        "job",
        "warning",
    )
    assert resolved.message == "train/grad_norm = 2 at step 16, not > 10"
    assert seen.metrics == {"alerts/grad-explosion": [(14, 1), (16, 0)]}
    assert_filed_like_callbacks(seen)


def test_non_finite_loss_fires_on_nan_and_inf_and_resolves(tmp_path: Path) -> None:
    """NaN then Inf is one firing alert (critical here); a finite loss resolves it."""
    losses = {s: 1.0 / s for s in range(1, 21)}
    losses.update({7: math.nan, 8: math.inf})
    rules = [
        {"name": "loss-nan", "metric": "train/loss", "kind": "non_finite", "severity": "critical"}
    ]
    seen = run(tmp_path, rules, {s: {"train/loss": v} for s, v in losses.items()})
    assert seen.transitions("loss-nan") == [("firing", 7), ("resolved", 9)]
    assert seen.alerts[0].message == "train/loss = NaN at step 7, not a finite number"
    assert seen.alerts[0].severity == "critical"
    assert seen.metrics == {"alerts/loss-nan": [(7, 1), (9, 0)]}
    assert seen.journal["train/loss"][7] != seen.journal["train/loss"][7]  # NaN kept as NaN
    assert_filed_like_callbacks(seen)


def test_a_non_finite_loss_rule_is_critical_unless_it_says_otherwise(tmp_path: Path) -> None:
    """A non_finite rule on train/loss with no severity fires as critical (in the callback and
    alerts.jsonl); one on the gradient norm stays a warning, and a severity given is kept."""
    rules = [
        {"name": "loss-nan", "metric": "train/loss", "kind": "non_finite"},
        {"name": "norm-nan", "metric": "train/grad_norm", "kind": "non_finite"},
        {"name": "eval-nan", "metric": "eval/loss", "kind": "non_finite", "severity": "info"},
    ]
    nan = {"train/loss": math.nan, "train/grad_norm": math.nan, "eval/loss": math.nan}
    steps = {1: {"train/loss": 1.0, "train/grad_norm": 1.0, "eval/loss": 1.0}, 2: nan}
    seen = run(tmp_path, rules, steps)
    severity = {a.rule: a.severity for a in seen.alerts}
    assert severity == {"loss-nan": "critical", "norm-nan": "warning", "eval-nan": "info"}
    assert {a["rule"]: a["severity"] for a in seen.filed} == severity


def test_loss_spike_against_the_rolling_median(tmp_path: Path) -> None:
    """A loss 5x its rolling median fires at that step, with the baseline in the details."""
    losses = {s: 2.0 + 0.01 * (s % 3) for s in range(1, 41)}
    losses[3] = 40.0  # too early: fewer than min_samples values
    losses[31] = 10.0
    rules = [
        {"name": "loss-spike", "metric": "train/loss", "kind": "spike", "factor": 3.0, "window": 20}
    ]
    seen = run(tmp_path, rules, {s: {"train/loss": v} for s, v in losses.items()})
    assert seen.transitions("loss-spike") == [("firing", 31), ("resolved", 32)]
    spike = seen.alerts[0]
    assert spike.details["baseline"] == pytest.approx(2.01)
    assert "its median of the last 20 values (2.01)" in spike.message
    assert seen.metrics == {"alerts/loss-spike": [(31, 1), (32, 0)]}


def test_throughput_drop_below_baseline(tmp_path: Path) -> None:
    """samples/s 40% below its median fires; the slow steps stay out of the baseline until
    throughput recovers."""
    rate = {s: 1000.0 for s in range(1, 41)}
    rate.update({s: 600.0 for s in range(21, 31)})
    rules = [{"name": "slowdown", "metric": "perf/samples_per_sec", "kind": "drop", "percent": 30}]
    rules[0]["window"] = 200
    seen = run(tmp_path, rules, {s: {"perf/samples_per_sec": v} for s, v in rate.items()})
    assert seen.transitions("slowdown") == [("firing", 21), ("resolved", 31)]
    assert "40% below its median of the last 20 values (1000): more than 30%" in (
        seen.alerts[0].message
    )
    assert seen.metrics == {"alerts/slowdown": [(21, 1), (31, 0)]}


def test_memory_growth_over_consecutive_windows(tmp_path: Path) -> None:
    """Peak memory whose window mean rises 3 windows running fires at that window's last step
    and resolves at the first window that does not rise."""
    memory = {s: 100.0 + (s - 1) // 10 * 50.0 for s in range(1, 61)}  # +50 MB per window
    memory.update({s: 250.0 for s in range(41, 61)})  # then flat
    rules = [{"name": "leak", "metric": "mem/peak_allocated_mb", "kind": "growth", "windows": 3}]
    seen = run(tmp_path, rules, {s: {"mem/peak_allocated_mb": v} for s, v in memory.items()})
    assert seen.transitions("leak") == [("firing", 40), ("resolved", 50)]
    assert seen.alerts[0].message == (
        "mem/peak_allocated_mb window mean rose in each of the last 3 windows "
        "(100, 150, 200, 250), to 250 at step 40"
    )
    assert seen.metrics == {"alerts/leak": [(40, 1), (50, 0)]}


def test_cross_rank_window_metric_is_judged_once_per_window(tmp_path: Path) -> None:
    """A metric that only exists at window ends (here a stand-in for the cross-rank reducer's
    perf/straggler_ratio) fires and resolves at window ends, while a per-step rule on a metric
    that is also in every window is not fed the window's mean a second time."""
    ratios = {10: 1.0, 20: 2.0, 30: 2.5, 40: 1.1}

    def reducer(window: WindowStats) -> dict[str, float]:
        return {"perf/straggler_ratio": ratios[window.last_step]}

    rules = [
        {"name": "straggler", "metric": "perf/straggler_ratio", "op": ">", "threshold": 1.5},
        # 40 values above 0.5: only window means counted as extra values could make it fire
        {"name": "loss-high", "metric": "train/loss", "op": ">", "threshold": 0.5},
    ]
    rules[1]["for_steps"] = 41
    inbox = Inbox()
    with trainmon.Monitor(config_for(tmp_path, rules)) as monitor:
        monitor._pipeline.reducer = reducer  # what rank 0 gets from the other ranks
        monitor.add_callback(inbox)
        for step in range(1, 41):
            monitor.step = step
            monitor.log({"train/loss": 1.0})
    seen = read_back(tmp_path, inbox)
    assert seen.journal["perf/straggler_ratio"] == ratios
    assert seen.transitions("straggler") == [("firing", 20), ("resolved", 40)]
    assert seen.transitions("loss-high") == []
    assert seen.alerts[0].message == "perf/straggler_ratio = 2 at step 20, > 1.5"
    assert seen.metrics == {"alerts/straggler": [(20, 1), (40, 0)]}
    assert_filed_like_callbacks(seen)


def test_lasting_condition_is_resent_after_the_cooldown(tmp_path: Path) -> None:
    """With cooldown_s 0.1, a loss that stays high for 0.6 s is sent again with a repeat
    count, then resolved once."""
    rules = [
        {"name": "high", "metric": "train/loss", "op": ">=", "threshold": 5, "cooldown_s": 0.1}
    ]
    steps = {s: {"train/loss": 9.0 if s <= 20 else 1.0} for s in range(1, 23)}
    seen = run(tmp_path, rules, steps, pause_s=0.03)
    states = [a.state for a in seen.alerts]
    assert states[0] == "firing" and states[-1] == "resolved" and states.count("resolved") == 1
    repeats = seen.alerts[1:-1]
    assert 2 <= len(repeats) <= 8
    assert [a.details["repeat"] for a in repeats] == list(range(1, len(repeats) + 1))
    assert all(a.message.startswith("still firing since step 1: ") for a in repeats)
    assert seen.metrics["alerts/high"][-1] == (21, 0)
    assert_filed_like_callbacks(seen)


def test_stop_action_makes_raise_if_stopped_raise(tmp_path: Path) -> None:
    """After a NaN loss under an "action": "stop" rule, the loop's raise_if_stopped raises
    TrainingStopped naming the rule; before it, nothing is raised."""
    rules = [{"name": "loss-nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}]
    with trainmon.Monitor(config_for(tmp_path, rules)) as monitor:
        for step in range(1, 6):
            monitor.step = step
            monitor.log({"train/loss": 1.0})
        monitor.flush()
        monitor.raise_if_stopped()
        assert monitor.stop_reason is None
        monitor.log({"train/loss": math.nan}, step=6)
        monitor.flush()
        with pytest.raises(trainmon.TrainingStopped) as stopped:
            monitor.raise_if_stopped()
    assert "'loss-nan'" in str(stopped.value)
    assert "train/loss = NaN at step 6" in str(stopped.value)
    assert monitor.stop_reason == stopped.value.reason


def test_no_rules_means_no_alert_machinery(tmp_path: Path) -> None:
    """Without rules the monitor builds no alert system and starts no extra thread."""
    before = {t.name for t in threading.enumerate()}
    with trainmon.Monitor(config_for(tmp_path, [])) as monitor:
        assert monitor.alerts is None
        started = {t.name for t in threading.enumerate()} - before
    assert not any("alert" in name or "watchdog" in name for name in started)


def test_rank_that_does_not_write_evaluates_no_metric_rule(tmp_path: Path) -> None:
    """On rank 1 of 2 metric rules are not evaluated and nothing is delivered; the stall
    watchdog still runs there."""
    rules = [
        {"name": "loss-nan", "metric": "train/loss", "kind": "non_finite"},
        {"name": "hang", "kind": "stall", "seconds": 60},
    ]
    inbox = Inbox()
    monitor = trainmon.Monitor(config_for(tmp_path, rules), place=ProcessPlace(1, 2))
    try:
        monitor.add_callback(inbox)
        assert monitor.alerts is not None
        assert monitor.alerts.engine is None and monitor.alerts.dispatcher is None
        assert monitor.alerts.watchdog is not None
        monitor.log({"train/loss": math.nan}, step=1)
        monitor.flush()
    finally:
        monitor.close()
    assert inbox.alerts == []
    assert not (tmp_path / "job" / "alerts.jsonl").exists()


# ---- with the engine ---------------------------------------------------------------------------


def _engine_or_skip(tmp_path: Path, rules: list[dict[str, Any]]) -> Any:
    """A trainmon engine on a tiny regression model, or skip when the engine does not call
    Monitor.step_end after its optimizer steps (then neither stop nor on_step_end can work)."""
    torch = pytest.importorskip("torch")
    if not hasattr(trainmon, "initialize"):
        pytest.skip("trainmon.initialize is not there")

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, batch: Any) -> Any:
            x, y = batch
            return ((self.linear(x) - y) ** 2).mean()

    torch.manual_seed(0)
    net = Regressor()
    config = config_for(tmp_path, rules, train_batch_size=4)
    config["optimizer"] = {"type": "SGD", "params": {"lr": 0.01}}
    engine, _, _, _ = trainmon.initialize(
        model=net, model_parameters=net.parameters(), config=config
    )

    class Probe:
        calls = 0

        def on_step_end(self, engine: Any, step: int) -> None:
            Probe.calls += 1

    engine.monitor.add_callback(Probe())
    engine.backward(engine((torch.ones(4, 2), torch.ones(4, 1))))
    engine.step()
    if Probe.calls == 0:
        engine.close()
        pytest.skip("the engine does not call Monitor.step_end after its optimizer step yet")
    return engine


def test_engine_raises_training_stopped_at_a_step_after_nan(tmp_path: Path) -> None:
    """With the engine, a NaN loss under a stop rule raises TrainingStopped from model.step()
    within a few steps, naming the rule."""
    torch = pytest.importorskip("torch")
    rules = [{"name": "loss-nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}]
    engine = _engine_or_skip(tmp_path, rules)
    x, y = torch.ones(4, 2), torch.ones(4, 1)
    with engine, pytest.raises(trainmon.TrainingStopped, match="loss-nan") as stopped:
        for step in range(2, 100):
            batch = (x * math.nan, y) if step == 5 else (x, y)
            engine.backward(engine(batch))
            engine.step()
            time.sleep(0.01)
    assert 5 <= engine.global_steps < 40
    assert stopped.value.reason == engine.monitor.stop_reason


def test_seed_alarm_callback_works_unchanged(tmp_path: Path, capsys: Any) -> None:
    """The seed's AlarmCallback, added with monitor.add_callback, prints its alarm from the
    engine's steps when the gradient norm is above its threshold."""
    torch = pytest.importorskip("torch")

    class AlarmCallback:  # the seed's code, with its message in English
        def __init__(self, threshold: float = 10.0) -> None:
            self.threshold = threshold

        def on_step_end(self, engine: Any, step: int) -> None:
            grad_norm = engine.get_global_grad_norm()
            if grad_norm is not None and grad_norm > self.threshold:
                print(f"[ALARM] step={step} grad_norm={grad_norm:.2f} above the threshold")

    engine = _engine_or_skip(tmp_path, [])
    engine.monitor.add_callback(AlarmCallback(threshold=0.0))
    with engine:
        for _ in range(3):
            engine.backward(engine((torch.ones(4, 2) * 10, torch.zeros(4, 1))))
            engine.step()
    alarms = [line for line in capsys.readouterr().out.splitlines() if "[ALARM]" in line]
    assert [line.split()[1] for line in alarms] == ["step=2", "step=3", "step=4"]
