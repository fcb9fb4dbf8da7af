"""How often the background thread wakes: rarely by default (each wake-up costs CPU beside the
training thread), promptly when an alert rule may stop training, as set when set."""

from __future__ import annotations

import time

import pytest

from trainmon import Monitor
from trainmon.config import PipelineConfig, load_config
from trainmon.errors import ConfigError
from trainmon.monitor_parts import pipeline_settings
from trainmon.testing import MemoryWriter

STOP_RULE = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}


def drain_of(source: dict[str, object]) -> float | None:
    """The interval a Monitor built from ``source`` drains at."""
    config = load_config(source)
    settings: PipelineConfig = pipeline_settings(config.trainmon, config.alerts.rule_configs())
    return settings.drain_interval_s


def test_null_means_one_second_and_sooner_with_a_stopping_rule() -> None:
    assert drain_of({}) == 1.0
    warn_only = {"alerts": {"rules": [{**STOP_RULE, "action": "alert"}]}}
    assert drain_of(warn_only) == 1.0
    stopping = {"alerts": {"rules": [STOP_RULE]}}
    assert drain_of(stopping) == 0.02
    chosen = {"alerts": {"rules": [STOP_RULE]}, "trainmon": {"drain_interval_s": 2.0}}
    assert drain_of(chosen) == 2.0


def test_a_bad_interval_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"trainmon\.drain_interval_s"):
        load_config({"trainmon": {"drain_interval_s": 0}})


def test_values_reach_the_writer_within_the_interval_without_a_flush() -> None:
    writer = MemoryWriter()
    config = {"console": {"enabled": False}, "trainmon": {"drain_interval_s": 0.1}}
    with Monitor(config, writers=[writer]) as monitor:
        monitor.write_events([("train/loss", 1.5, 1)])
        deadline = time.monotonic() + 5.0
        while not writer.values("train/loss") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writer.values("train/loss") == [(1, 1.5)]


def test_a_fast_loop_drains_once_enough_calls_wait_whatever_the_interval() -> None:
    """With a 30 s interval, fewer calls than the cap wait for it; the call that reaches the cap
    wakes the background at once (entries that wait out the interval in a fast loop fill the
    old garbage-collection generation and cost the training thread full collections)."""
    from trainmon.core.pipeline import WAKE_AT_ENTRIES

    writer = MemoryWriter()
    config = {"console": {"enabled": False}, "trainmon": {"drain_interval_s": 30.0}}
    with Monitor(config, writers=[writer]) as monitor:
        for step in range(1, WAKE_AT_ENTRIES):
            monitor.write_events([("train/loss", float(step), step)])
        time.sleep(0.5)
        assert writer.values("train/loss") == []
        monitor.write_events([("train/loss", float(WAKE_AT_ENTRIES), WAKE_AT_ENTRIES)])
        deadline = time.monotonic() + 5.0
        while len(writer.values("train/loss")) < WAKE_AT_ENTRIES and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(writer.values("train/loss")) == WAKE_AT_ENTRIES


def test_side_events_and_a_drain_reset_do_not_hurry_the_next_drain() -> None:
    """DeepSpeed's per-step side events do not count towards the busy-queue wake-up, and the
    count starts again at each drain: ``attach`` at 100 steps a second (a step call and a side
    call each) drains once a second, not every 128 entries."""
    from trainmon.core.pipeline import WAKE_AT_ENTRIES

    writer = MemoryWriter()
    config = {"console": {"enabled": False}, "trainmon": {"drain_interval_s": 30.0}}
    with Monitor(config, writers=[writer]) as monitor:
        for step in range(1, WAKE_AT_ENTRIES):
            monitor.write_events([("train/loss", float(step), step)])
            monitor.write_side_events([("Train/Samples/loss", float(step), step)], ["csv"])
        time.sleep(0.5)
        assert writer.values("train/loss") == []  # 254 entries, 127 calls: no drain yet
        monitor.flush()  # a drain: the count starts again
        assert len(writer.values("train/loss")) == WAKE_AT_ENTRIES - 1
        for step in range(WAKE_AT_ENTRIES, 2 * WAKE_AT_ENTRIES - 1):
            monitor.write_events([("train/loss", float(step), step)])
        time.sleep(0.5)
        assert len(writer.values("train/loss")) == WAKE_AT_ENTRIES - 1
        monitor.write_events([("train/loss", 0.0, 2 * WAKE_AT_ENTRIES - 1)])
        deadline = time.monotonic() + 5.0
        while len(writer.values("train/loss")) < 2 * WAKE_AT_ENTRIES - 1:
            assert time.monotonic() < deadline, len(writer.values("train/loss"))
            time.sleep(0.01)
