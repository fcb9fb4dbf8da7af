"""Hang records: what each rank was doing when it stopped stepping, and the merged verdict.

When a ``stall`` rule fires, the watchdog of **every** rank writes ``hang-rank<r>.json`` to the
run folder (shared by the ranks; each rank's own ``rank-<r>`` folder with ``per_rank_output``):
its last step, the last collective it entered and whether it left it (from
:mod:`trainmon.core.activity`), and the innermost frames of its training thread, next to the
full ``stacks-rank<r>-*.txt``. :func:`diagnose` merges the records of all ranks into one
verdict — which ranks wait in which collective, which rank is behind and where it is:

    ranks 0, 2, 3 wait in all_reduce #1043; rank 1 is at step 41 in slow_data_loader (data.py:88)

``trainmon hang RUN`` prints it (while the job is still hung, or after it was killed), and
the stall alert of the writing rank carries it in its message.

A record stays on disk after its stall is over, so :func:`judge` says whether the verdict is
still *current*: it checks each record against the journal beside it (``metrics.jsonl``: its
``meta`` lines, one per attempt, and ``end`` lines, read as a stream) and the file sink's
``alerts.jsonl``. A record is stale when a later attempt started after it (a newer ``meta``
line, or one of the same rank with another pid), when its stall was resolved (a ``resolved``
stall alert after it, or journal steps past its step after it), or when its attempt ended (an
``end`` line). :func:`scan_records` also names the record files it could not read.
"""

from __future__ import annotations

import os
import socket
import sys
import sysconfig
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from trainmon.core.alert import ALERTS_FILE
from trainmon.journal import JOURNAL_FILE

__all__ = [
    "HANG_FILE_GLOB",
    "Currency",
    "HangVerdict",
    "RecordScan",
    "diagnose",
    "hang_file",
    "judge",
    "read_records",
    "scan_records",
    "thread_frames",
    "write_record",
]

HANG_FILE_GLOB = "hang-rank*.json"
RECORD_VERSION = 1
_KEPT_FRAMES = 12
#: torch.distributed functions that mean "waiting for the other ranks" when a stack is in one
#: (a rank without trainmon's comms instrumentation still shows where it waits).
_COLLECTIVE_FUNCTIONS = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
        "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
        "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter",
        "send", "recv", "barrier", "monitored_barrier", "wait",
    }
)  # fmt: skip
_TRAINMON_DIR = str(Path(__file__).resolve().parents[1])
_STDLIB_DIRS = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths()["stdlib"],) if p})


def hang_file(folder: Path, rank: int) -> Path:
    """``<folder>/hang-rank<r>.json`` (one per rank: the latest stall's record)."""
    return folder / f"hang-rank{rank}.json"


def _kind(filename: str) -> str:
    """``trainmon``, ``stdlib``, ``library`` (site-/dist-packages) or ``user`` code."""
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return "user"
    if path.startswith(_TRAINMON_DIR):
        return "trainmon"
    if "site-packages" in path or "dist-packages" in path:
        return "library"
    if path.startswith(_STDLIB_DIRS):
        return "stdlib"
    return "user"


def thread_frames(ident: int, limit: int = _KEPT_FRAMES) -> list[dict[str, Any]]:
    """The innermost ``limit`` Python frames of thread ``ident``, innermost first, each
    ``{"file", "line", "function", "kind"}``; empty when the thread is gone. Read from another
    thread: it needs nothing from the (stuck) thread itself."""
    frame = sys._current_frames().get(ident)
    frames: list[dict[str, Any]] = []
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        frames.append(
            {
                "file": code.co_filename,
                "line": frame.f_lineno,
                "function": code.co_name,
                "kind": _kind(code.co_filename),
            }
        )
        frame = frame.f_back
    return frames


def write_record(folder: Path, record: Mapping[str, Any]) -> Path:
    """Write one rank's record atomically (temp file + rename): a reader never sees half."""
    folder.mkdir(parents=True, exist_ok=True)
    path = hang_file(folder, int(record["rank"]))
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_bytes(orjson.dumps(dict(record), option=orjson.OPT_INDENT_2))
    os.replace(temp, path)
    return path


def build_record(
    *,
    rank: int,
    world_size: int,
    step: int,
    stalled_since: float,
    collective: Mapping[str, Any] | None,
    training_thread: int,
    stack_file: Path | None,
    job: str = "",
) -> dict[str, Any]:
    """One rank's record, as the watchdog writes it (see the module doc)."""
    return {
        "version": RECORD_VERSION,
        "rank": rank,
        "world_size": world_size,
        "job": job,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        "step": step,
        "stalled_since": stalled_since,
        "collective": dict(collective) if collective is not None else None,
        "frames": thread_frames(training_thread),
        "thread": next((t.name for t in threading.enumerate() if t.ident == training_thread), "?"),
        "stack_file": str(stack_file) if stack_file is not None else None,
    }


def _shape_problem(record: Any) -> str | None:
    """Why a decoded file is not a hang record (None when it is one)."""
    if not isinstance(record, dict):
        return f"not a hang record: a JSON {type(record).__name__}, not an object"
    rank, written, step = record.get("rank"), record.get("time"), record.get("step")
    if type(rank) is not int or rank < 0:
        return "not a hang record: no rank"
    if isinstance(written, bool) or not isinstance(written, int | float):
        return "not a hang record: no time"
    if type(step) is not int:
        return "not a hang record: no step"
    frames = record.get("frames")
    if frames is not None and (
        not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames)
    ):
        return "not a hang record: frames are not a list of frames"
    collective = record.get("collective")
    if collective is not None and not isinstance(collective, dict):
        return "not a hang record: collective is not an object"
    world_size = record.get("world_size")
    if world_size is not None and type(world_size) is not int:
        return "not a hang record: world_size is not a whole number"
    return None


def _load_record(path: Path) -> tuple[dict[str, Any] | None, str]:
    """``(record, "")``, or ``(None, why it is damaged)``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    if not data.strip():
        return None, "empty"
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return None, "not JSON: cut short" if "end of data" in str(exc) else "not JSON"
    problem = _shape_problem(record)
    if problem is not None:
        return None, problem
    return record, ""


@dataclass(frozen=True)
class RecordScan:
    """What :func:`scan_records` found: the newest readable record per rank, and the record
    files it could not use."""

    records: dict[int, dict[str, Any]]
    damaged: list[tuple[str, str]] = field(default_factory=list)
    """``(file, why)``: the file relative to the run folder, e.g. ``("hang-rank1.json",
    "not JSON")``."""

    def damaged_line(self) -> str:
        """``1 damaged record: hang-rank1.json (not JSON)`` ("" when none is)."""
        if not self.damaged:
            return ""
        count = len(self.damaged)
        listed = ", ".join(f"{name} ({why})" for name, why in self.damaged)
        return f"{count} damaged record{'' if count == 1 else 's'}: {listed}"


def scan_records(run: Path, *, newer_than: float | None = None) -> RecordScan:
    """The records of ``run`` and its ``rank-<r>`` folders (the newest per rank), and the
    damaged ones (not JSON, cut short, or not shaped like a record); records written before
    ``newer_than`` (a wall time) are skipped."""
    found: dict[int, dict[str, Any]] = {}
    damaged: list[tuple[str, str]] = []
    folders = [run, *sorted(p for p in run.glob("rank-*") if p.is_dir())] if run.is_dir() else []
    for folder in folders:
        for path in sorted(folder.glob(HANG_FILE_GLOB)):
            record, why = _load_record(path)
            if record is None:
                damaged.append((path.relative_to(run).as_posix(), why))
                continue
            rank, written = int(record["rank"]), float(record["time"])
            if newer_than is not None and written < newer_than:
                continue
            record["path"] = str(path)
            if rank not in found or written > float(found[rank]["time"]):
                found[rank] = record
    return RecordScan(found, damaged)


def read_records(run: Path, *, newer_than: float | None = None) -> dict[int, dict[str, Any]]:
    """rank -> its record, from ``run`` and its ``rank-<r>`` folders (the newest per rank);
    records written before ``newer_than`` (a wall time) and damaged files are skipped."""
    return scan_records(run, newer_than=newer_than).records


# ---- the verdict -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HangVerdict:
    """The merged diagnosis: one line for alerts, and a few lines per rank for the CLI."""

    line: str
    waiting: dict[str, list[int]] = field(default_factory=dict)
    """"all_reduce #1043" -> the ranks inside that collective."""
    behind: list[int] = field(default_factory=list)
    """Ranks not inside the collective most ranks wait in (or at the lowest step)."""
    missing: list[int] = field(default_factory=list)
    """Ranks of the job without a record."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``trainmon hang --json``)."""
        return {
            "verdict": self.line,
            "waiting": self.waiting,
            "behind": self.behind,
            "missing": self.missing,
        }


def _where(record: Mapping[str, Any]) -> str:
    """``slow_data_loader (data.py:88)``: the innermost frame of the user's code (else of a
    library, else any), as a function and a file:line."""
    frames: Sequence[Mapping[str, Any]] = record.get("frames") or ()
    for kinds in (("user",), ("library",), ("user", "library", "stdlib", "trainmon")):
        for frame in frames:
            if frame.get("kind") in kinds:
                return f"{frame['function']} ({Path(str(frame['file'])).name}:{frame['line']})"
    return "an unknown place (no Python frame)"


def collective_of(record: Mapping[str, Any]) -> str | None:
    """``"all_reduce #1043"`` (``"all_reduce #7 on ranks 0,1"`` for a sub-group) when the rank
    is inside a collective: from the comms record, else from a torch.distributed frame."""
    collective = record.get("collective")
    if isinstance(collective, Mapping) and collective.get("inside"):
        group = collective.get("group") or "world"
        text = f"{collective.get('op')} #{collective.get('seq')}"
        return text if group == "world" else f"{text} on {group}"
    for frame in record.get("frames") or ():
        file = str(frame.get("file", "")).replace("\\", "/")
        if "torch/distributed" in file and frame.get("function") in _COLLECTIVE_FUNCTIONS:
            return f"{frame['function']} (seq. unknown)"
    return None


def _ranks(ranks: Iterable[int]) -> str:
    listed = sorted(ranks)
    if len(listed) == 1:
        return f"rank {listed[0]}"
    return "ranks " + ", ".join(map(str, listed))


def diagnose(
    records: Mapping[int, Mapping[str, Any]], world_size: int | None = None
) -> HangVerdict:
    """Merge the ranks' records into a verdict (see the module doc).

    The collective most ranks are inside is the one "the others wait in"; the ranks not inside
    it are behind, each named with its step and where its training thread is. With nobody in
    a collective, the ranks at the lowest step are behind.
    """
    if world_size is None:
        world_size = max((int(r.get("world_size", 1)) for r in records.values()), default=0)
    missing = [rank for rank in range(world_size) if rank not in records]
    waiting: dict[str, list[int]] = {}
    for rank in sorted(records):
        inside = collective_of(records[rank])
        if inside is not None:
            waiting.setdefault(inside, []).append(rank)
    parts: list[str] = []
    if waiting:
        main = max(waiting, key=lambda key: (len(waiting[key]), -min(waiting[key])))
        ranks = waiting[main]
        parts.append(f"{_ranks(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {main}")
        behind = [rank for rank in sorted(records) if rank not in ranks]
    else:
        lowest = min((int(r.get("step", 0)) for r in records.values()), default=0)
        behind = [rank for rank in sorted(records) if int(records[rank].get("step", 0)) == lowest]
        if len(behind) == len(records) and len(records) > 1:
            parts.append(f"no rank is inside a collective; all at step {lowest}")
    for rank in behind:
        record = records[rank]
        inside = collective_of(record)
        text = f"rank {rank} is at step {record.get('step')}"
        text += f" inside {inside} at {_where(record)}" if inside else f" in {_where(record)}"
        parts.append(text)
    if not waiting and not behind:
        parts.append("no record to judge")
    if missing:
        parts.append(
            f"no record from {_ranks(missing)} (still stepping, crashed, or its run folder is "
            "not shared)"
        )
    return HangVerdict("; ".join(parts), waiting, behind, missing)


def describe_rank(record: Mapping[str, Any], now: float | None = None) -> list[str]:
    """A few lines about one rank for ``trainmon hang``: step, collective, frames, files."""
    now = time.time() if now is None else now
    rank = record.get("rank")
    written = float(record.get("time", now))
    stalled = written - float(record.get("stalled_since") or written)
    lines = [
        f"rank {rank} ({record.get('host')}, pid {record.get('pid')}): last step "
        f"{record.get('step')}, no step for {stalled:.0f} s when recorded "
        f"{now - written:.0f} s ago"
    ]
    collective = record.get("collective")
    if isinstance(collective, Mapping):
        group = collective.get("group") or "world"
        state = "inside" if collective.get("inside") else "left"
        since = collective.get("entered_at") if collective.get("inside") else None
        age = f" for {float(record.get('time', now)) - float(since):.0f} s" if since else ""
        lines.append(
            f"  last collective: {collective.get('op')} #{collective.get('seq')} on {group} "
            f"({state}{age})"
        )
    else:
        lines.append("  last collective: none recorded (comms instrumentation off, or none yet)")
    frames = record.get("frames") or []
    lines.append(f"  training thread {record.get('thread', '?')!r}, innermost first:")
    for frame in frames[:6]:
        lines.append(
            f"    {frame.get('function')} ({frame.get('file')}:{frame.get('line')}) "
            f"[{frame.get('kind')}]"
        )
    if not frames:
        lines.append("    (no Python frame: the thread had ended)")
    if record.get("stack_file"):
        lines.append(f"  every thread's stack: {record['stack_file']}")
    return lines


# ---- is the verdict still current? -------------------------------------------------------------

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


def _json_object(line: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _close_attempt(attempt: _Attempt | None, scalars: list[bytes]) -> None:
    """Give ``attempt`` the step and time of its last readable ``scalars`` line."""
    if attempt is None:
        return
    for line in reversed(scalars):
        record = _json_object(line)
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
            record = _json_object(line)
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
            alert = _json_object(line)
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


def _own_attempt(record: Mapping[str, Any], attempts: Sequence[_Attempt]) -> _Attempt | None:
    """The attempt that wrote ``record``: the last one of its rank and pid (and host); else,
    for a rank that writes no journal of its own, the last one started before it."""
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
    if own is not None and own.end is not None:
        said, ended = _ended(own.end, now, "the run")
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
    ``end`` line). With some records current, the stale ones are ``left_out``; with none, the
    newest record's story is the ``stale_reason``. Without a journal or an alert file to check
    against, a record counts as current.
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
