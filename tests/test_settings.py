"""One config mechanism: ranges and choices live on the field metadata, one checker applies
them to sections, alert rules and sinks alike, and the docs' config table is made from the same
metadata."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import trainmon
from conftest import load_docs_hooks
from trainmon.config import (
    SINK_SETTINGS,
    AlertRuleConfig,
    PipelineConfig,
    TrainmonConfig,
    WebhookSinkSettings,
    load_config,
    parse_sinks,
    reference_rows,
)
from trainmon.schema import Limits, fields_of

ROOT = Path(__file__).resolve().parent.parent

# ---- hand-written cases: the exact message -----------------------------------------------------

_SPIKE = {"name": "spiky", "kind": "spike", "metric": "train/loss", "factor": 3.0}
_EMAIL = {"type": "email", "host": "smtp.example.com", "sender": "a@b", "to": ["c@d"]}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"trainmon": {"queue_size": 0}},
            "config: 'trainmon.queue_size' = 0: expected an integer >= 1",
        ),
        (
            {"trainmon": {"log_rank": -1}},
            "config: 'trainmon.log_rank' = -1: expected an integer >= 0 or 'last'",
        ),
        (
            {"trainmon": {"close_timeout_s": math.inf}},
            "config: 'trainmon.close_timeout_s' = inf: expected a finite number of seconds >= 0",
        ),
        (
            {"prometheus": {"port": 65536}},
            "config: 'prometheus.port' = 65536: expected an integer from 0 to 65535",
        ),
        (
            {"throughput": {"peak_tflops": 0}},
            "config: 'throughput.peak_tflops' = 0: expected a finite number > 0",
        ),
        (
            {"comet": {"samples_log_interval": "often"}},
            "config: 'comet.samples_log_interval' = 'often': expected an integer >= 0",
        ),
        ({"steps_per_print": 0}, "config: 'steps_per_print' = 0: expected an integer >= 1"),
        (
            {"alerts": {"rules": [{**_SPIKE, "factor": 1}]}},
            "rule 'spiky': 'alerts.rules[0].factor' = 1: expected a finite number > 1",
        ),
        (
            {"alerts": {"rules": [{**_SPIKE, "window": 10, "min_samples": 20}]}},
            "rule 'spiky': 'alerts.rules[0].min_samples' = 20: expected an integer from 1 to "
            "window (10)",
        ),
        (
            {"alerts": {"rules": [{**_SPIKE, "window": None}]}},
            "rule 'spiky': 'alerts.rules[0].window' = None: expected an integer >= 2",
        ),
        (
            {
                "alerts": {
                    "rules": [{"name": "slow", "kind": "drop", "metric": "m", "percent": 100}]
                }
            },
            "rule 'slow': 'alerts.rules[0].percent' = 100: expected a number between 0 and 100",
        ),
        (
            {"alerts": {"rules": [{**_SPIKE, "labels": {"team": 7}}]}},
            "rule 'spiky': 'alerts.rules[0].labels' = {'team': '***'}: expected a mapping of "
            "strings to strings",
        ),
        (
            {"alerts": {"sinks": [{"type": "console"}, {**_EMAIL, "timeout_s": -1}]}},
            "'alerts.sinks[1].timeout_s' = -1: expected a finite number of seconds > 0",
        ),
        (
            {"alerts": {"sinks": [{"type": "pushgateway", "url": "http://h:9091", "job": " "}]}},
            "'alerts.sinks[0].job' = ' ': expected a non-empty string",
        ),
        (
            {"alerts": {"sinks": [{**_EMAIL, "to": ["oncall@example.com", ""]}]}},
            "'alerts.sinks[0].to[1]' = '': expected a non-empty string",
        ),
        (
            {"alerts": {"sinks": [{"type": "webhook", "url": "http://h", "msgtype": "text"}]}},
            "'alerts.sinks[0].msgtype' = 'text': expected no msgtype: it is a setting of the "
            "dingtalk format",
        ),
    ],
)
def test_a_refused_value_names_the_key_the_value_and_what_is_expected(
    config: dict[str, Any], message: str
) -> None:
    """Sections, rules and sinks give one message shape: 'key path' = value: expected ..."""
    with pytest.raises(trainmon.ConfigError) as refused:
        load_config(config)
    assert str(refused.value) == message


def test_settings_built_in_code_are_checked_and_converted_too() -> None:
    """A section, rule or sink built in code is checked by the same metadata as one loaded
    from a file, its keys named under where it lives in a config; an int becomes a float."""
    with pytest.raises(trainmon.ConfigError) as refused:
        PipelineConfig(queue_size=0)
    assert str(refused.value) == "'trainmon.queue_size' = 0: expected an integer >= 1"
    with pytest.raises(trainmon.ConfigError) as refused:
        WebhookSinkSettings(url="ftp://host/x")
    assert str(refused.value) == (
        "'alerts.sinks[type=webhook].url' = 'ftp://host/***': expected an http:// or https:// "
        'URL, e.g. "https://hooks.slack.com/services/T000/B000/XXXX"'
    )
    with pytest.raises(trainmon.ConfigError, match=r"'alerts.rules\[\].window' = 1"):
        AlertRuleConfig(name="r", metric="m", kind="spike", factor=2.0, window=1)
    wait = PipelineConfig(full_wait_s=2).full_wait_s
    assert wait == 2.0 and isinstance(wait, float)
    assert TrainmonConfig(trainmon=PipelineConfig(queue_size=5)).trainmon.queue_size == 5


def test_sinks_are_typed_settings_with_their_defaults() -> None:
    """Each alerts.sinks entry becomes its type's settings object, defaults filled in."""
    webhook, email = parse_sinks([{"type": "webhook", "url": "http://127.0.0.1:9/"}, _EMAIL])
    assert isinstance(webhook, WebhookSinkSettings)
    assert (webhook.format, webhook.timeout_s, webhook.headers) == ("json", 5.0, {})
    assert type(email) is SINK_SETTINGS["email"]
    assert (email.security, email.port, email.tls_verify) == ("starttls", None, True)


# ---- every declared range, just outside and just inside ----------------------------------------

_RULE_BASE: dict[str, dict[str, Any]] = {
    "threshold": {"metric": "m", "op": ">", "threshold": 1.0},
    "non_finite": {"metric": "m"},
    "spike": {"metric": "m", "factor": 2.0},
    "drop": {"metric": "m", "percent": 10.0},
    "growth": {"metric": "m"},
    "stall": {"seconds": 5.0},
}
_RULE_KIND = {
    "for_steps": "threshold",
    "factor": "spike",
    "window": "spike",
    "min_samples": "spike",
    "percent": "drop",
    "windows": "growth",
    "seconds": "stall",
    "multiple": "stall",
}
_SINK_BASE: dict[str, dict[str, Any]] = {
    "console": {},
    "file": {"path": "alerts.jsonl"},
    "webhook": {"url": "http://127.0.0.1:9/"},
    "email": {"host": "h", "sender": "a@b", "to": ["c@d"]},
    "pushgateway": {"url": "http://127.0.0.1:9"},
    "alertmanager": {"url": "http://127.0.0.1:9"},
}


def _config_with(where: str, key: str, value: Any) -> tuple[dict[str, Any], str]:
    """A config that sets only ``key`` of ``where`` to ``value``, and the key's full path."""
    if where == "":
        return {key: value}, key
    if where == "rule":
        kind = _RULE_KIND.get(key, "threshold")
        rule = {"name": "r", "kind": kind, **_RULE_BASE[kind], key: value}
        return {"alerts": {"rules": [rule]}}, f"alerts.rules[0].{key}"
    if where.startswith("sink:"):
        kind = where.split(":", 1)[1]
        sink = {"type": kind, **_SINK_BASE[kind], key: value}
        return {"alerts": {"sinks": [sink]}}, f"alerts.sinks[0].{key}"
    return {where: {key: value}}, f"{where}.{key}"


def _ranged_fields() -> list[tuple[str, str, Any, Limits]]:
    """(where, key, annotation, limits) for every field that declares a numeric bound."""
    owners: list[tuple[str, type]] = [("", TrainmonConfig), ("rule", AlertRuleConfig)]
    owners += [(f"sink:{kind}", cls) for kind, cls in SINK_SETTINGS.items()]
    defaults = TrainmonConfig()
    owners += [
        (f.name, type(getattr(defaults, f.name)))
        for f in dataclasses.fields(TrainmonConfig)
        if dataclasses.is_dataclass(getattr(defaults, f.name))
    ]
    found = []
    for where, cls in owners:
        for name, tp, limits in fields_of(cls):
            if (limits.ge, limits.gt, limits.le, limits.lt) != (None, None, None, None):
                found.append((where, name, tp, limits))
    return found


RANGED = _ranged_fields()


def _is_int(tp: Any) -> bool:
    return "int" in str(tp) and "float" not in str(tp)


def _outside_and_inside(tp: Any, limits: Limits) -> list[tuple[Any, bool]]:
    step = 1 if _is_int(tp) else 1e-6
    cases: list[tuple[Any, bool]] = []
    if limits.ge is not None:
        cases += [(limits.ge - step, False), (limits.ge, True)]
    if limits.gt is not None:
        cases += [(limits.gt, False), (limits.gt + step, True)]
    if limits.le is not None:
        cases += [(limits.le + step, False), (limits.le, True)]
    if limits.lt is not None:
        cases += [(limits.lt, False), (limits.lt - step, True)]
    return cases


def test_the_metadata_declares_ranges_for_sections_rules_and_sinks() -> None:
    """The parametrised test below really covers all three kinds of settings."""
    wheres = {where.split(":")[0] for where, *_ in RANGED}
    assert {"", "trainmon", "prometheus", "throughput", "rule", "sink"} <= wheres
    assert len(RANGED) >= 30


@pytest.mark.parametrize(
    ("where", "key", "tp", "limits"), RANGED, ids=[f"{w or 'top'}.{k}" for w, k, *_ in RANGED]
)
def test_every_declared_range_refuses_just_outside_and_accepts_just_inside(
    where: str, key: str, tp: Any, limits: Limits
) -> None:
    """A value just past a bound is refused naming the full key path and the value; the
    bound itself (or just inside an exclusive one) loads and keeps the value."""
    for value, ok in _outside_and_inside(tp, limits):
        config, path = _config_with(where, key, value)
        if ok:
            load_config(config)
            continue
        with pytest.raises(trainmon.ConfigError) as refused:
            load_config(config)
        assert f"'{path}' = {value!r}: expected " in str(refused.value)


# ---- the config reference table ----------------------------------------------------------------


def _readme_rows() -> list[str]:
    """The rows of the config reference page as the docs build renders it (its hook)."""
    page = (ROOT / "docs" / "config.md").read_text()
    rendered = load_docs_hooks().on_page_markdown(page, page=None)
    return [line for line in rendered.splitlines() if line.startswith("| `")]


def test_readme_table_is_exactly_the_generated_one() -> None:
    """Every row of the config page's table is generated, in order, and none is stale."""
    expected = [f"| `{k}` | {t} | `{d}` | {doc} |" for k, t, d, doc in reference_rows()]
    assert _readme_rows() == expected


def test_readme_table_lists_rule_and_sink_keys_with_what_they_accept() -> None:
    """The table documents alert rule keys and each sink type's keys, ranges included."""
    rows = _readme_rows()
    for start in (
        "| `alerts.rules[].factor` | a finite number > 1 or null | `(required by spike)` |",
        "| `alerts.rules[].percent` | a number between 0 and 100 or null | `(required by drop)` |",
        "| `alerts.sinks[].type` | one of 'console', 'file', 'webhook', 'email', 'pushgateway', "
        "'alertmanager' | `(required)` |",
        "| `alerts.sinks[type=webhook].url` | an http:// or https:// URL | `(required)` |",
        "| `alerts.sinks[type=webhook].timeout_s` | a finite number of seconds > 0 | `5.0` |",
        "| `alerts.sinks[type=email].port` | an integer from 1 to 65535 or null | `None` |",
        "| `alerts.sinks[type=pushgateway].job` | a non-empty string or null | `None` |",
        "| `trainmon.queue_size` | an integer >= 1 | `200000` |",
    ):
        assert any(row.startswith(start) for row in rows), start


# ---- trainmon validate, as a real process --------------------------------------------------------


@pytest.mark.parametrize(
    ("alerts", "message"),
    [
        (
            {"sinks": [{"type": "webhook", "url": "http://127.0.0.1:9/", "timeout_s": 0}]},
            "'alerts.sinks[0].timeout_s' = 0: expected a finite number of seconds > 0",
        ),
        (
            {"rules": [{"name": "slow", "kind": "drop", "metric": "perf/x", "percent": 150}]},
            "rule 'slow': 'alerts.rules[0].percent' = 150: expected a number between 0 and 100",
        ),
    ],
    ids=["sink-timeout", "rule-percent"],
)
def test_trainmon_validate_reports_sink_and_rule_values(
    alerts: dict[str, Any], message: str, tmp_path: Path
) -> None:
    """`python -m trainmon validate` exits 2 and prints the message naming the key."""
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 8, "alerts": alerts}))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "trainmon", "validate", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "config OK" not in done.stdout
