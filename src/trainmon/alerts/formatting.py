"""How an alert reads in every human and JSON format: one place, so that the console, the
file, chat bots and e-mail say the same thing (NaN and ±Inf as the journal spells them)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from trainmon.core.alert import Alert


def alert_time(alert: Alert) -> float:
    """When the alert happened (now, for an alert built without a time)."""
    return alert.time if alert.time > 0 else time.time()


def iso_time(t: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager and people expect."""
    text = datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def json_ready(value: Any) -> Any:
    """``value`` with NaN/±Inf as the journal's strings, so the result is standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def json_bytes(obj: Any) -> bytes:
    """Standard JSON (see :func:`json_ready`), UTF-8; anything else becomes its ``str``."""
    return json.dumps(json_ready(obj), ensure_ascii=False, allow_nan=False, default=str).encode()


def alert_title(alert: Alert) -> str:
    """``[FIRING] grad-explosion (critical)``: the subject line of every human format."""
    return f"[{alert.state.upper()}] {alert.rule} ({alert.severity})"


def alert_facts(alert: Alert) -> list[tuple[str, str]]:
    """The alert's facts as (name, text) pairs, empty ones left out."""
    facts = [("job", alert.job), ("rank", str(alert.rank)), ("kind", alert.kind)]
    if alert.metric is not None:
        facts.append(("metric", alert.metric))
    if alert.value is not None:
        facts.append(("value", f"{alert.value:.6g}"))
    if alert.step is not None:
        facts.append(("step", str(alert.step)))
    facts.append(("time", iso_time(alert_time(alert))))
    facts += [(str(k), str(v)) for k, v in alert.labels.items()]
    facts += [(str(k), str(v)) for k, v in alert.details.items()]
    return [(k, v) for k, v in facts if v != ""]


def alert_text(alert: Alert) -> str:
    """Title, message and facts as plain text (e-mail, Feishu, Alertmanager descriptions)."""
    lines = [f"trainmon {alert_title(alert)}", alert.message, ""]
    lines += [f"{name}: {text}" for name, text in alert_facts(alert)]
    return "\n".join(lines)


def alert_markdown(alert: Alert) -> str:
    """Title, message and facts as Markdown (DingTalk)."""
    lines = [f"#### trainmon {alert_title(alert)}", "", f"> {alert.message}", ""]
    lines += [f"- **{name}**: {text}" for name, text in alert_facts(alert)]
    return "\n".join(lines)
