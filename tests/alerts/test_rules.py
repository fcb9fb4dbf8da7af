"""Alert rule configs, conditions and the rule engine, without threads or files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.alerts.engine import AlertEngine
from trainmon.config import AlertRuleConfig
from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.alert import Alert
from trainmon.core.events import StepScalars

# ---- configs: bad rules fail at start-up -----------------------------------------------------

GOOD = {"name": "grad-explosion", "metric": "train/grad_norm", "op": ">", "threshold": 10.0}

BAD_RULES = [
    pytest.param(
        {"name": "leak", "metric": "mem/peak_allocated_mb", "kind": "growht"},
        ["alerts.rules[1].kind", "'leak'", "'growht'", "did you mean 'growth'"],
        id="unknown-kind",
    ),
    pytest.param(
        {"name": "loss-spike", "kind": "spike", "factor": 3.0},
        ["alerts.rules[1].metric", "'loss-spike'", "is missing"],
        id="missing-metric",
    ),
    pytest.param(
        {"name": "big-loss", "metric": "train/loss", "op": ">", "threshold": "high"},
        ["alerts.rules[1].threshold", "'big-loss'", "'high'", "expected a number"],
        id="threshold-not-a-number",
    ),
    pytest.param(
        {"name": "grad-explosion", "metric": "train/loss", "kind": "non_finite"},
        ["alerts.rules[1].name", "'grad-explosion'", "already", "alerts.rules[0]", "unique"],
        id="duplicate-name",
    ),
    pytest.param(
        {"name": "big-loss", "metric": "train/loss", "op": ">", "treshold": 1.0},
        ["alerts.rules[1].treshold", "'big-loss'", "unknown key", "did you mean 'threshold'"],
        id="unknown-key",
    ),
    pytest.param(
        {"name": "big-loss", "metric": "train/loss", "op": ">", "threshold": 1, "factor": 2},
        ["alerts.rules[1].factor", "does not apply to kind 'threshold'", "spike"],
        id="key-of-another-kind",
    ),
    pytest.param(
        {"name": "big-loss", "metric": "train/loss", "op": "=>", "threshold": 1.0},
        ["alerts.rules[1].op", "'=>'", "'>='"],
        id="unknown-op",
    ),
    pytest.param(
        {"name": "slow", "metric": "perf/samples_per_sec", "kind": "drop", "percent": 130},
        ["alerts.rules[1].percent", "'slow'", "between 0 and 100"],
        id="percent-out-of-range",
    ),
    pytest.param(
        {"name": "hang", "kind": "stall"},
        ["'hang'", "alerts.rules[1].seconds", "alerts.rules[1].multiple"],
        id="stall-without-a-limit",
    ),
    pytest.param(
        {"metric": "train/loss", "kind": "non_finite"},
        ["alerts.rules[1].name", "is missing"],
        id="missing-name",
    ),
    pytest.param(
        {"name": "nan", "metric": "train/loss"},
        ["alerts.rules[1].kind", "'nan'", "is missing", "threshold, non_finite"],
        id="missing-kind",
    ),
    pytest.param(
        {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "halt"},
        ["alerts.rules[1].action", "'nan'", "'halt'", "'stop'"],
        id="unknown-action",
    ),
]


@pytest.mark.parametrize(("rule", "expected"), BAD_RULES)
def test_bad_rule_fails_when_the_monitor_starts(
    rule: dict[str, Any], expected: list[str], tmp_path: Path
) -> None:
    """A bad rule stops Monitor construction with a ConfigError naming the rule and the key."""
    config = {"console": {"enabled": False}, "alerts": {"rules": [GOOD, rule]}}
    with pytest.raises(trainmon.ConfigError) as err:
        trainmon.Monitor(config)
    for part in expected:
        assert part in str(err.value)


def test_bad_rule_in_a_config_file_fails_at_load(tmp_path: Path) -> None:
    """A config file with a bad rule fails in load_config, before anything starts."""
    path = tmp_path / "ds_config.json"
    path.write_text('{"alerts": {"rules": [{"name": "x", "metric": "m", "op": ">"}]}}')
    with pytest.raises(trainmon.ConfigError, match=r"'x'.*alerts\.rules\[0\]\.threshold"):
        trainmon.load_config(path)


def test_issue_example_config_loads_with_defaults() -> None:
    """The issue's seven rules load; op alone means a threshold rule and defaults are filled."""
    rules = [
        GOOD | {"for_steps": 3},
        {"name": "loss-nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"},
        {"name": "loss-spike", "metric": "train/loss", "kind": "spike", "factor": 3.0},
        {"name": "slowdown", "metric": "perf/samples_per_sec", "kind": "drop", "percent": 30},
        {"name": "leak", "metric": "mem/peak_allocated_mb", "kind": "growth", "windows": 5},
        {"name": "straggler", "metric": "perf/straggler_ratio", "op": ">", "threshold": 1.5},
        {"name": "hang", "kind": "stall", "seconds": 300},
    ]
    parsed = trainmon.load_config({"alerts": {"rules": rules}}).alerts.rule_configs()
    assert [r.kind for r in parsed] == [
        *("threshold", "non_finite", "spike", "drop", "growth", "threshold", "stall")
    ]
    assert parsed[0].for_steps == 3 and parsed[0].severity == "warning"
    assert parsed[1].action == "stop" and parsed[2].baseline == "median"
    assert parsed[2].window == 100 and parsed[6].cooldown_s == 300.0


# ---- the engine, fed by hand -----------------------------------------------------------------


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rule(**keys: Any) -> AlertRuleConfig:
    """One checked rule from its keys."""
    return trainmon.load_config({"alerts": {"rules": [keys]}}).alerts.rule_configs()[0]


def engine_with(
    *rules: AlertRuleConfig, clock: Clock | None = None
) -> tuple[AlertEngine, list[Alert]]:
    """An engine whose alerts land in a list."""
    sent: list[Alert] = []
    engine = AlertEngine(rules, lambda alert, _: sent.append(alert), clock=clock or Clock())
    return engine, sent


def feed(engine: AlertEngine, metric: str, values: dict[int, float]) -> list[StepScalars]:
    """One record per step, as the pipeline hands them over; returns the alert metrics."""
    records = [StepScalars(step, float(step), {metric: v}) for step, v in values.items()]
    return list(engine.on_records(records))


def window(first: int, last: int, **means: float) -> WindowStats:
    """A window whose metrics have the given means."""
    stats = {name.replace("__", "/"): MetricStats(1, m, m, m, m) for name, m in means.items()}
    return WindowStats(first, last, float(first), float(last), stats)


def transitions(sent: list[Alert]) -> list[tuple[str, int | None]]:
    """(state, step) of each alert."""
    return [(a.state, a.step) for a in sent]


def test_cooldown_resends_while_the_condition_lasts_then_resolves() -> None:
    """A lasting condition is re-sent once per cool-down, then resolved once, with metrics."""
    clock = Clock()
    engine, sent = engine_with(
        rule(name="big", metric="x", op=">", threshold=5, cooldown_s=60), clock=clock
    )
    metrics = feed(engine, "x", {1: 9, 2: 9})
    clock.now += 59
    metrics += feed(engine, "x", {3: 9})
    clock.now += 1
    metrics += feed(engine, "x", {4: 9, 5: 9})
    clock.now += 100
    metrics += feed(engine, "x", {6: 1, 7: 9})
    assert transitions(sent) == [("firing", 1), ("firing", 4), ("resolved", 6), ("firing", 7)]
    assert sent[1].message == "still firing since step 1: x = 9 at step 4, > 5"
    assert sent[1].details["repeat"] == 1
    assert sent[2].message == "x = 1 at step 6, not > 5"
    assert [(r.step, r.values) for r in metrics] == [
        (1, {"alerts/big": 1}),
        (4, {"alerts/big": 1}),
        (6, {"alerts/big": 0}),
        (7, {"alerts/big": 1}),
    ]


def test_spike_needs_min_samples_and_keeps_spikes_out_of_the_baseline() -> None:
    """A spike cannot fire before min_samples values; spikes do not raise the median baseline."""
    engine, sent = engine_with(
        rule(name="spike", metric="loss", kind="spike", factor=3, window=5, min_samples=3)
    )
    feed(engine, "loss", {1: 1.0, 2: 50.0, 3: 1.0, 4: 1.0, 5: 9.0, 6: 9.0, 7: 1.0})
    assert transitions(sent) == [("firing", 5), ("resolved", 7)]
    assert "its median of the last 4 values (1)" in sent[0].message
    assert sent[0].details["baseline"] == 1.0 and sent[0].details["ratio"] == 9.0


def test_mean_baseline_and_nan_values_are_skipped_by_drop() -> None:
    """A drop rule with a mean baseline ignores NaN values instead of resolving on them."""
    engine, sent = engine_with(
        rule(name="slow", metric="sps", kind="drop", percent=30, window=4, baseline="mean")
    )
    feed(engine, "sps", {1: 100, 2: 110, 3: 90, 4: 100, 5: 60, 6: math.nan, 7: 61, 8: 95})
    assert transitions(sent) == [("firing", 5), ("resolved", 8)]
    assert "40% below its mean of the last 4 values (100)" in sent[0].message


def test_window_before_its_records_is_not_judged_twice() -> None:
    """A window handed over before its own records is judged after them, per-step metrics not
    again; a metric only in windows (cross-rank) is judged on the window."""
    engine, sent = engine_with(
        rule(name="high", metric="train/loss", op=">", threshold=0.5, for_steps=3),
        rule(name="straggler", metric="perf/straggler_ratio", op=">", threshold=1.5),
    )
    # the pipeline closes window 1..2 when the record of step 3 arrives, before on_records
    assert engine.on_window(window(1, 2, train__loss=1.0, perf__straggler_ratio=2.0)) == []
    out = feed(engine, "train/loss", {1: 1.0, 2: 1.0})
    assert transitions(sent) == [("firing", 2)]  # only the straggler; loss has 2 values, not 3
    assert sent[0].rule == "straggler" and sent[0].value == 2.0
    assert [(r.step, r.values) for r in out] == [(2, {"alerts/straggler": 1})]
    engine.on_window(window(3, 4, train__loss=1.0, perf__straggler_ratio=1.0))
    assert transitions(sent) == [("firing", 2)]  # waits for the records of steps 3..4
    feed(engine, "train/loss", {3: 1.0, 4: 0.1})
    assert [(a.rule, a.state, a.step) for a in sent[1:]] == [
        ("high", "firing", 3),
        ("high", "resolved", 4),
        ("straggler", "resolved", 4),
    ]


def test_growth_fires_after_rises_in_consecutive_windows() -> None:
    """Growth fires once the window mean rose in each of the last N windows, resolves when flat."""
    engine, sent = engine_with(rule(name="leak", metric="mem/mb", kind="growth", windows=3))
    feed(engine, "other", {60: 0.0})  # records through step 60 were seen
    for last, mean in [(10, 100.0), (20, 90.0), (30, 95.0), (40, 99.0), (50, 120.0), (60, 120.0)]:
        engine.on_window(window(last - 9, last, mem__mb=mean))
    assert transitions(sent) == [("firing", 50), ("resolved", 60)]
    assert sent[0].message == (
        "mem/mb window mean rose in each of the last 3 windows (90, 95, 99, 120), to 120 at step 50"
    )
