"""Whether a hang verdict is current: the ranks' hang records checked against what the run
wrote after them (a later attempt, a resolved stall, the run's end), read from its journal and
``alerts.jsonl`` as a stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmon.core.alert import ALERTS_FILE
from trainmon.journal import JOURNAL_FILE, json_object

_META_MARK = b'"meta"'
_END_MARK = b'"end"'
_SCALARS_MARK = b'"scalars"'


@dataclass
class _Attempt:
    """One ``meta`` line of a journal and what followed it: its ``end`` line, if any, and its
    last ``scalars`` line."""

    start: float
    pid: Any
    host: Any
    rank: Any
    id: str
    end: dict[str, Any] | None = None
    last_step: int | None = None
    last_step_time: float | None = None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _close_attempt(attempt: _Attempt | None, scalars: list[bytes]) -> None:
    """Give ``attempt`` the step and time of its last readable ``scalars`` line."""
    if attempt is None:
        return
    for line in reversed(scalars):
        record = json_object(line)
        if record is None:
            continue  # cut short by a kill: the one before it
        step, when = record.get("step"), _number(record.get("time"))
        if type(step) is int and when is not None:
            attempt.last_step, attempt.last_step_time = step, when
            return


def _scan_journal(path: Path) -> list[_Attempt]:
    """The attempts of a journal, read line by line (never the whole file): only ``meta`` and
    ``end`` lines are decoded, and the last ``scalars`` line of each attempt."""
    attempts: list[_Attempt] = []
    current: _Attempt | None = None
    scalars: list[bytes] = []  # the last two scalars lines of the current attempt
    with open(path, "rb") as f:
        for line in f:
            if _SCALARS_MARK in line:
                scalars = [scalars[-1], line] if scalars else [line]
                continue
            if _META_MARK not in line and _END_MARK not in line:
                continue
            record = json_object(line)
            kind = record.get("kind") if record is not None else None
            if record is None or kind not in ("meta", "end"):
                continue
            if kind == "meta":
                _close_attempt(current, scalars)
                scalars = []
                current = _Attempt(
                    start=_number(record.get("time")) or 0.0,
                    pid=record.get("pid"),
                    host=record.get("host"),
                    rank=record.get("rank"),
                    id=str(record.get("attempt") or f"pid {record.get('pid')}"),
                )
                attempts.append(current)
            elif current is not None:
                current.end = record
    _close_attempt(current, scalars)
    return attempts


def _scan_stall_resolutions(path: Path) -> list[dict[str, Any]]:
    """The ``resolved`` alerts of ``stall`` rules in an ``alerts.jsonl``, read line by line."""
    found: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        for line in f:
            if b'"resolved"' not in line or b'"stall"' not in line:
                continue
            alert = json_object(line)
            if (
                alert is not None
                and alert.get("kind") == "stall"
                and alert.get("state") == "resolved"
                and _number(alert.get("time")) is not None
            ):
                found.append(alert)
    return found


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 100:
        return f"{seconds:.0f} s ago"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def when(t: float, now: float) -> str:
    """``14:02:11 (3 min ago)``; with the date when ``t`` is not today."""
    same_day = time.localtime(t)[:3] == time.localtime(now)[:3]
    stamp = time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(t))
    return f"{stamp} ({_ago(now - t)})"


def _ended(end: Mapping[str, Any], now: float, subject: str) -> tuple[str, dict[str, Any]]:
    """``the run ended at 14:02:21 (5 s ago) with status success at step 30``."""
    at = _number(end.get("time"))
    status = end.get("status") or "unknown"
    text = f"{subject} ended" + (f" at {when(at, now)}" if at is not None else "")
    text += f" with status {status}"
    if type(end.get("step")) is int:
        text += f" at step {end['step']}"
    if end.get("stop_reason"):
        text += f" (stopped by alert {end['stop_reason']!r})"
    event = {"what": "ended", "time": at, "status": status, "step": end.get("step")}
    return text, event


@dataclass(frozen=True)
class _Look:
    """One record judged: what happened after it (nothing: it is current)."""

    events: list[dict[str, Any]]
    reason: str | None
    checked: list[str]


@dataclass(frozen=True)
class Currency:
    """Whether the hang records describe the job as it is now (:func:`judge`)."""

    current: bool
    stale_reason: str | None
    """What happened after the records, and when, in plain words (None while current)."""
    since: list[dict[str, Any]] = field(default_factory=list)
    """The same as facts: ``{"what": "later_attempt" | "resolved" | "resumed" | "ended",
    "time": ..., ...}``."""
    recorded_at: float = 0.0
    """The time of the newest record judged."""
    left_out: dict[int, str] = field(default_factory=dict)
    """Ranks whose record is stale while others' are current: rank -> why (left out of the
    current verdict)."""
    checked: list[str] = field(default_factory=list)
    """The journals and alert files the records were checked against."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``trainmon hang --json``)."""
        return {
            "current": self.current,
            "stale_reason": self.stale_reason,
            "since": self.since,
            "recorded_at": self.recorded_at,
            "left_out": {str(rank): why for rank, why in sorted(self.left_out.items())},
            "checked": self.checked,
        }


class _Context:
    """The journals and alert files beside the records, each read once."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self._attempts: dict[Path, list[_Attempt]] = {}
        self._resolutions: dict[Path, list[dict[str, Any]]] = {}

    def _folders(self, record: Mapping[str, Any]) -> list[Path]:
        folders: list[Path] = []
        if record.get("path"):
            folders.append(Path(str(record["path"])).parent)
        folders += [self.run, self.run / "rank-0"]
        return list(dict.fromkeys(folders))

    def journal(self, record: Mapping[str, Any]) -> tuple[Path | None, list[_Attempt]]:
        """The journal beside ``record`` (its own folder's, else the run folder's, else rank
        0's) and its attempts."""
        for folder in self._folders(record):
            path = folder / JOURNAL_FILE
            if path in self._attempts:
                return path, self._attempts[path]
            if path.is_file():
                try:
                    self._attempts[path] = _scan_journal(path)
                except OSError:
                    continue
                return path, self._attempts[path]
        return None, []

    def resolutions(self, record: Mapping[str, Any]) -> tuple[list[Path], list[dict[str, Any]]]:
        """The stall resolutions in the alert files beside ``record``."""
        paths: list[Path] = []
        found: list[dict[str, Any]] = []
        for folder in self._folders(record):
            path = folder / ALERTS_FILE
            if path not in self._resolutions:
                if not path.is_file():
                    continue
                try:
                    self._resolutions[path] = _scan_stall_resolutions(path)
                except OSError:
                    continue
            paths.append(path)
            found += self._resolutions[path]
        return paths, found


def _same_process(record: Mapping[str, Any], attempt: _Attempt) -> bool:
    return (
        attempt.rank == record.get("rank")
        and attempt.pid == record.get("pid")
        and (attempt.host is None or record.get("host") in (None, attempt.host))
    )


def _from_store(record: Mapping[str, Any]) -> bool:
    """A record copied from the job's store: its rank ran on another node, whose progress is
    its ``last_state`` there, never the attempts of the journal it was copied beside."""
    return record.get("via") == "store"


def _own_attempt(record: Mapping[str, Any], attempts: Sequence[_Attempt]) -> _Attempt | None:
    """The attempt that wrote ``record``: the last one of its rank and pid (and host); else,
    for a rank that writes no journal of its own, the last one started before it. None for a
    record copied from the job's store (its node's journal is not here)."""
    if _from_store(record):
        return None
    written = float(record["time"])
    for attempt in reversed(attempts):
        if _same_process(record, attempt) and attempt.start <= written:
            return attempt
    before = next((a for a in reversed(attempts) if a.start <= written), None)
    if before is not None and before.rank == record.get("rank"):
        return None  # a process of this rank that did not write this journal
    return before


def _later_attempt(record: Mapping[str, Any], latest: _Attempt, now: float) -> _Look:
    """``record`` predates ``latest``: say when that attempt started and how it ended."""
    written = float(record["time"])
    if latest.start > written:
        text = (
            f"these records predate a later attempt: a new attempt (pid {latest.pid}) started "
            f"at {when(latest.start, now)}, after they were written"
        )
    else:  # the same rank, another process (the clocks disagree)
        text = (
            f"these records predate a later attempt: they were written by pid "
            f"{record.get('pid')}, and a new attempt (pid {latest.pid}) started at "
            f"{when(latest.start, now)}"
        )
    event: dict[str, Any] = {
        "what": "later_attempt",
        "time": latest.start,
        "attempt": latest.id,
        "pid": latest.pid,
        "end": None,
    }
    if latest.end is not None:
        said, event["end"] = _ended(latest.end, now, "it")
        text += f"; {said}"
    else:
        text += "; it wrote no end line (still running, or killed)"
    return _Look([event], text, [])


def _went_on_elsewhere(
    record: Mapping[str, Any], written: float, now: float
) -> tuple[str, dict[str, Any]] | None:
    """A store record's rank stepped on after it: its ``last_state`` (its node's own word,
    refreshed from the job's store) is at a later step, seen after the record was written."""
    state = record.get("last_state")
    if not isinstance(state, Mapping):
        return None
    step, at = state.get("step"), _number(state.get("time"))
    if type(step) is not int or at is None or step <= int(record["step"]) or at < written:
        return None
    text = (
        f"training went on after the stall on rank {record.get('rank')}'s node: its state in "
        f"the job's store was at step {step} at {when(at, now)}"
    )
    return text, {"what": "resumed", "time": at, "step": step}


def _look(record: Mapping[str, Any], context: _Context, now: float) -> _Look:
    """What happened after ``record`` (see :func:`judge`)."""
    written = float(record["time"])
    step = int(record["step"])
    journal, attempts = context.journal(record)
    alert_files, resolutions = context.resolutions(record)
    checked = [str(p) for p in ([journal] if journal else []) + alert_files]
    own = _own_attempt(record, attempts)
    latest = attempts[-1] if attempts else None
    if latest is not None and latest is not own and (own is not None or latest.start > written):
        look = _later_attempt(record, latest, now)
        return _Look(look.events, look.reason, checked)
    events: list[dict[str, Any]] = []
    parts: list[str] = []
    later = sorted(
        (a for a in resolutions if float(a["time"]) >= written), key=lambda a: float(a["time"])
    )
    if later:
        first = later[0]
        at = float(first["time"])
        text = f"the stall was resolved at {when(at, now)}"
        if type(first.get("step")) is int:
            text += f", when training steps resumed at step {first['step']}"
        parts.append(text)
        events.append({"what": "resolved", "time": at, "step": first.get("step")})
    elif _from_store(record):
        went_on = _went_on_elsewhere(record, written, now)
        if went_on is not None:
            parts.append(went_on[0])
            events.append(went_on[1])
    elif (
        own is not None
        and own.last_step is not None
        and own.last_step > step
        and own.last_step_time is not None
        and own.last_step_time >= written
    ):
        parts.append(
            f"training went on after the stall: step {own.last_step} was logged at "
            f"{when(own.last_step_time, now)}"
        )
        events.append({"what": "resumed", "time": own.last_step_time, "step": own.last_step})
    run = latest if _from_store(record) else own  # the run's end is the job's, on every node
    if run is not None and run.end is not None:
        said, ended = _ended(run.end, now, "the run")
        parts.append(said)
        events.append(ended)
    if not parts:
        return _Look([], None, checked)
    return _Look(events, ", and ".join(parts), checked)


def judge(
    run: Path, records: Mapping[int, Mapping[str, Any]], now: float | None = None
) -> Currency:
    """Whether ``records`` (from :func:`read_records`) say what is true now.

    Each record is checked against the journal beside it (its folder's ``metrics.jsonl``, else
    the run folder's, else ``rank-0``'s) and the ``alerts.jsonl`` files there. A record is stale
    when a later attempt started after it (a newer ``meta`` line, or the latest attempt of its
    rank has another pid), when its stall was resolved (a ``resolved`` stall alert after it, or
    a ``scalars`` line of its attempt past its step and time), or when its attempt ended (an
    ``end`` line). A record copied from the job's store (``"via": "store"``, a rank of another
    node) is not matched with the journal's attempts: it is stale when a later attempt of the
    job started after it, its stall was resolved, its rank's ``last_state`` in the store is
    past its step, or the run ended. With some records current, the stale ones are
    ``left_out``; with none, the newest record's story is the ``stale_reason``. Without a
    journal or an alert file to check against, a record counts as current.
    """
    now = time.time() if now is None else now
    context = _Context(run)
    looks = {rank: _look(records[rank], context, now) for rank in sorted(records)}
    checked = list(dict.fromkeys(p for look in looks.values() for p in look.checked))
    current = [rank for rank, look in looks.items() if look.reason is None]
    newest = max(records, key=lambda r: float(records[r]["time"]), default=None)
    if newest is None:
        return Currency(True, None, checked=checked)
    if current:
        left_out = {
            rank: str(look.reason) for rank, look in looks.items() if look.reason is not None
        }
        recorded = max(float(records[r]["time"]) for r in current)
        return Currency(True, None, recorded_at=recorded, left_out=left_out, checked=checked)
    look = looks[newest]
    return Currency(
        False, look.reason, look.events, float(records[newest]["time"]), checked=checked
    )
