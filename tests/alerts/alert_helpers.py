"""What the alert sink tests share: a sample alert, the text of captured log records, and no
proxy for requests to loopback (a fixture the test modules import)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.alerts.watchdog import StallWatchdog
from trainmon.core.alert import Alert


def make_alert(rule: str = "grad-explosion", state: str = "firing", **changes: Any) -> Alert:
    """A threshold alert as the rules engine sends it (``changes`` override its fields)."""
    fields: dict[str, Any] = {
        "rule": rule,
        "kind": "threshold",
        "state": state,
        "message": f"train/grad_norm = 1e+06 > 1000 at step 120 ({rule})",
        "metric": "train/grad_norm",
        "value": 1e6,
        "step": 120,
        "time": time.time(),
        "severity": "critical",
        "job": "llm-run",
        "rank": 0,
        "labels": {"team": "ml"},
        "details": {"threshold": 1000.0},
    }
    fields.update(changes)
    return Alert(**fields)


def log_text(records: list[logging.LogRecord]) -> str:
    """The records as a handler would print them, tracebacks included."""
    return "\n".join(logging.Formatter().format(r) for r in records)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy configured on the machine."""
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


class ClockedWatchdog:
    """A stall watchdog on a hand-driven clock and step count (for the store's timing tests):
    ``clock[0]`` and ``step[0]`` are what it reads; ``sent`` what it alerted."""

    def __init__(self, folder: Path, seconds: float, world_size: int, store: Any) -> None:
        rule = trainmon.load_config(
            {"alerts": {"rules": [{"name": "hang", "kind": "stall", "seconds": seconds}]}}
        ).alerts.rule_configs()[0]
        self.clock = [100.0]
        self.step = [0]
        self.sent: list[Alert] = []
        self.dog = StallWatchdog(
            [rule],
            progress=lambda: (self.step[0], self.step[0]),
            stack_dir=folder,
            send=lambda alert, _: self.sent.append(alert),
            world_size=world_size,
            clock=lambda: self.clock[0],
            poll_s=0.01,
            store=store,
        )
