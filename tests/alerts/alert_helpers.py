"""What the alert sink tests share: a sample alert, the text of captured log records, and no
proxy for requests to loopback (a fixture the test modules import)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

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
