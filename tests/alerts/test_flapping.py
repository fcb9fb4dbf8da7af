"""A flapping condition is one notification: resolve only after the condition stayed clear,
and a re-fire within the cool-down is counted in ``alerts/<rule>`` but not sent."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon


def flapping_run(
    tmp_path: Path,
    rule: dict[str, Any],
    losses: list[float],
    pause_s: float = 0.0,
    drain_interval_s: float | None = None,
) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Log ``losses`` at steps 1.. through a Monitor with ``rule`` and a file sink; return the
    alerts file's lines and the journal's ``alerts/<rule>`` values by step."""
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "alerts": {"rules": [rule], "sinks": [{"type": "file"}]},
        "trainmon": {"drain_interval_s": drain_interval_s},
    }
    with trainmon.Monitor(config) as monitor:
        for step, loss in enumerate(losses, start=1):
            monitor.step = step
            monitor.log({"train/loss": loss})
            if pause_s:
                time.sleep(pause_s)
    text = (tmp_path / "job" / "alerts.jsonl").read_text()
    filed = [json.loads(line) for line in text.splitlines() if line.strip()]
    flags = {
        r["step"]: r["values"][f"alerts/{rule['name']}"]
        for r in trainmon.read_journal(tmp_path / "job")
        if r["kind"] == "scalars" and f"alerts/{rule['name']}" in r["values"]
    }
    return filed, flags


def three_in_ten(steps: int) -> list[float]:
    """The loss is above 1.0 at 3 steps in every 10 (steps 1-3, 11-13, ...), else 0.5."""
    return [2.0 if step % 10 in (1, 2, 3) else 0.5 for step in range(1, steps + 1)]


def test_flapping_threshold_sends_one_firing_with_the_defaults(tmp_path: Path) -> None:
    """loss > 1.0 with default settings over 100 steps, above 3 steps in every 10: one firing
    notification (none of the 10 re-fires, no resolved: it is never clear for a window);
    cleared for a whole window afterwards, exactly one resolved."""
    rule = {"name": "hot", "metric": "train/loss", "op": ">", "threshold": 1.0}
    filed, flags = flapping_run(tmp_path, rule, three_in_ten(100) + [0.5] * 15)
    assert [(a["state"], a["step"]) for a in filed] == [("firing", 1), ("resolved", 103)]
    assert flags == {1: 1, 103: 0}  # clear from step 94: ten clear steps at 103


def test_resolve_after_counts_clear_steps_and_a_quick_refire_is_not_sent(
    tmp_path: Path,
) -> None:
    """With resolve_after 3 the rule resolves after 3 clear steps; a re-fire within cooldown_s
    is not notified, yet alerts/<rule> shows it (1, then 0 when it clears again)."""
    rule = {"name": "hot", "metric": "train/loss", "op": ">", "threshold": 1.0}
    rule["resolve_after"] = 3
    losses = [2.0, 0.5, 0.5, 0.5, 2.0, 0.5, 0.5, 0.5, 0.5]
    filed, flags = flapping_run(tmp_path, rule, losses)
    assert [(a["state"], a["step"]) for a in filed] == [("firing", 1), ("resolved", 4)]
    assert flags == {1: 1, 4: 0, 5: 1, 8: 0}


#: the default interval, and one so long that every value is judged at once when the monitor
#: closes: seconds are counted on the values' own times, so both send the same alerts
DRAINS = pytest.mark.parametrize("drain", [None, 30.0], ids=["default-drain", "judged-at-close"])


@DRAINS
def test_a_refire_after_the_cooldown_is_sent_again(tmp_path: Path, drain: float | None) -> None:
    """Once cooldown_s has passed since the last firing notification, a re-fire is sent."""
    rule = {"name": "hot", "metric": "train/loss", "op": ">", "threshold": 1.0}
    rule.update(resolve_after=1, cooldown_s=0.3)
    losses = [2.0, 0.5, 0.5, 0.5, 0.5, 2.0, 0.5]
    filed, _ = flapping_run(tmp_path, rule, losses, pause_s=0.1, drain_interval_s=drain)
    states = [(a["state"], a["step"]) for a in filed]
    assert states == [("firing", 1), ("resolved", 2), ("firing", 6), ("resolved", 7)]


@DRAINS
def test_resolve_after_s_holds_the_resolve_until_clear_that_long(
    tmp_path: Path, drain: float | None
) -> None:
    """resolve_after_s: clear steps alone do not resolve until the condition has been clear
    for that many seconds."""
    rule = {"name": "hot", "metric": "train/loss", "op": ">", "threshold": 1.0}
    rule.update(resolve_after=1, resolve_after_s=0.35)
    losses = [2.0] + [0.5] * 8
    filed, _ = flapping_run(tmp_path, rule, losses, pause_s=0.1, drain_interval_s=drain)
    (fired, resolved) = filed
    assert fired["state"] == "firing" and resolved["state"] == "resolved"
    assert resolved["step"] >= 5  # the first clear step is 2: at least 3 more at 0.1 s apart


@pytest.mark.parametrize(("key", "value"), [("resolve_after", 0), ("resolve_after_s", -1.0)])
def test_resolve_settings_are_range_checked(key: str, value: float) -> None:
    """resolve_after below 1 or a negative resolve_after_s is refused, naming the key path."""
    rule = {"name": "hot", "metric": "train/loss", "op": ">", "threshold": 1.0, key: value}
    with pytest.raises(trainmon.ConfigError, match=rf"alerts\.rules\[0\]\.{key}"):
        trainmon.load_config({"alerts": {"rules": [rule]}})
