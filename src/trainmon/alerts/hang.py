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

A rank that is *gone* (its node or its torchrun agent was killed) is named as such, not as
waiting or behind: a record copied from the job's store carries ``last_seen``, the time of the
rank's latest state there, which its watchdog refreshes every few seconds while stalled; the
merging rank refreshes the copies (and its own record's ``last_seen``) while the stall lasts.
A rank whose ``last_seen`` fell :data:`GONE_AFTER_S` behind the freshest other rank's is gone,
and so is one whose process is known to have ended (:func:`dead_processes`: same host, its pid
no longer runs while another rank's still does).
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

from trainmon.alerts.hang_life import dead_processes, last_seen, record_time
from trainmon.alerts.hang_store import HEARTBEAT_S

__all__ = [
    "HANG_FILE_GLOB",
    "HangVerdict",
    "RecordScan",
    "dead_processes",
    "diagnose",
    "hang_file",
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
    gone: list[int] = field(default_factory=list)
    """Ranks with no sign of life while the others had one (their node or agent stopped)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``trainmon hang --json``)."""
        return {
            "verdict": self.line,
            "waiting": self.waiting,
            "behind": self.behind,
            "missing": self.missing,
            "gone": self.gone,
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


#: Up to this many ranks are listed one by one; more are written as ranges with a count.
LISTED_RANKS = 8
#: Groups of ranks behind shown in the verdict line; the rest are counted.
SHOWN_GROUPS = 6
#: A record this much older than the newest one is a rank with no sign of life since.
SILENT_AFTER_S = 30.0
#: A rank whose ``last_seen`` is this much older than the freshest other rank's is gone: a
#: stalled rank's watchdog refreshes its state every :data:`HEARTBEAT_S` (three were missed).
GONE_AFTER_S = 3 * HEARTBEAT_S


def _ranks(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0, 1, 5`` or, for many, ``1,022 ranks (0–16, 18–902, 904–1023)``:
    a verdict at 1,024 ranks stays one screen."""
    listed = sorted(ranks)
    if len(listed) == 1:
        return f"rank {listed[0]}"
    if len(listed) <= LISTED_RANKS:
        return "ranks " + ", ".join(map(str, listed))
    runs: list[tuple[int, int]] = []
    for rank in listed:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    shown = [str(a) if a == b else f"{a}–{b}" for a, b in runs[:4]]
    more = ", …" if len(runs) > 4 else ""
    return f"{len(listed):,} ranks ({', '.join(shown)}{more})"


def _place(record: Mapping[str, Any]) -> str:
    """``at step 811 in load_batch (data.py:40)`` (or ``inside all_reduce #812 at ...``)."""
    inside = collective_of(record)
    text = f"at step {record.get('step')}"
    return text + (f" inside {inside} at {_where(record)}" if inside else f" in {_where(record)}")


def diagnose(
    records: Mapping[int, Mapping[str, Any]],
    world_size: int | None = None,
    *,
    dead: Mapping[int, float] | None = None,
) -> HangVerdict:
    """Merge the ranks' records into a verdict (see the module doc).

    The collective most ranks are inside is the one "the others wait in"; the ranks not inside
    it are behind, grouped by where they are (their step and the innermost frame). With nobody
    in a collective, the ranks at the lowest step are behind. A rank that is gone
    (:func:`gone_ranks`; ``dead``: rank -> seconds since its last sign of life, for ranks whose
    process is known to have ended) is named as gone ("rank 1 (host b7): gone — no sign of life
    for 40 s (its node/agent stopped)"); one whose record is much older than the newest as
    silent ("no sign of life for 40 s"). Ranks are written as ranges when there are many, so
    the verdict of 1,024 ranks fits on one screen.
    """
    if world_size is None:
        world_size = max((int(r.get("world_size", 1)) for r in records.values()), default=0)
    missing = [rank for rank in range(world_size) if rank not in records]
    gone = gone_ranks(records, dead)
    newest = max((record_time(r) for r in records.values()), default=0.0)
    silent = {
        rank: newest - record_time(r)
        for rank, r in records.items()
        if newest - record_time(r) > SILENT_AFTER_S and rank not in gone
    }
    present = {rank: r for rank, r in records.items() if rank not in gone}
    waiting: dict[str, list[int]] = {}
    for rank in sorted(present):
        if rank in silent:  # named on its own: where it was is old news
            continue
        inside = collective_of(records[rank])
        if inside is not None:
            waiting.setdefault(inside, []).append(rank)
    parts: list[str] = []
    if waiting:
        main = max(waiting, key=lambda key: (len(waiting[key]), -min(waiting[key])))
        ranks = waiting[main]
        parts.append(f"{_ranks(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {main}")
        behind = [rank for rank in sorted(present) if rank not in ranks]
    else:
        lowest = min((int(r.get("step", 0)) for r in present.values()), default=0)
        behind = [rank for rank in sorted(present) if int(present[rank].get("step", 0)) == lowest]
        if len(behind) == len(present) and len(present) > 1:
            parts.append(f"no rank is inside a collective; all at step {lowest}")
    places: dict[str, list[int]] = {}
    for rank in behind:
        if rank not in silent:
            places.setdefault(_place(records[rank]), []).append(rank)
    groups = sorted(places.items(), key=lambda item: (-len(item[1]), min(item[1])))
    for place, ranks in groups[:SHOWN_GROUPS]:
        parts.append(f"{_ranks(ranks)} {'is' if len(ranks) == 1 else 'are'} {place}")
    hidden = sum(len(ranks) for _, ranks in groups[SHOWN_GROUPS:])
    if hidden:
        parts.append(f"{hidden:,} more rank(s) behind elsewhere (trainmon hang --json lists them)")
    parts += _gone_parts(records, gone)
    for age, quiet in _by_age(silent):
        parts.append(f"{_ranks(quiet)}: no sign of life for {age:.0f} s")
    if not waiting and not behind and not gone:
        parts.append("no record to judge")
    if missing:
        parts.append(
            f"no record from {_ranks(missing)} (still stepping, crashed, or its run folder is "
            "not shared)"
        )
    return HangVerdict("; ".join(parts), waiting, behind, missing, sorted(gone))


# ---- gone: no sign of life while the others had one ------------------------------------------


def _heartbeats(record: Mapping[str, Any]) -> bool:
    """Whether the rank was to refresh its state every :data:`HEARTBEAT_S`: its latest state
    says it is stalled, or predates its record (written when its stall fired). A rank whose
    stall resolved said so at once, and from then on refreshes its state only when its step
    changed, at most every :data:`~trainmon.alerts.hang_store.STEADY_STATE_S` (30 s): its
    ``last_seen`` may lag by that much without its node being gone."""
    state = record.get("last_state")
    if not isinstance(state, Mapping) or state.get("stalled", True):
        return True
    at = state.get("time")
    return isinstance(at, int | float) and at <= record_time(record)


def gone_ranks(
    records: Mapping[int, Mapping[str, Any]], dead: Mapping[int, float] | None = None
) -> dict[int, tuple[float, str]]:
    """rank -> (seconds without a sign of life, why) for the ranks that are gone: a stalled
    rank whose ``last_seen`` is :data:`GONE_AFTER_S` older than the freshest other rank's
    (its watchdog stopped refreshing its state: its node or agent stopped), and the ranks of
    ``dead`` (its process is known to have ended)."""
    seen = {rank: at for rank, r in records.items() if (at := last_seen(r)) is not None}
    top = sorted(((at, rank) for rank, at in seen.items()), reverse=True)[:2]
    gone: dict[int, tuple[float, str]] = {}
    for rank, at in seen.items() if len(top) == 2 else ():
        freshest = top[1][0] if rank == top[0][1] else top[0][0]  # the freshest other rank's
        if freshest - at > GONE_AFTER_S and _heartbeats(records[rank]):
            gone[rank] = (freshest - at, "node/agent stopped")
    for rank, age in (dead or {}).items():
        if rank in records and rank not in gone:
            gone[rank] = (age, "process ended")
    return gone


def _gone_parts(
    records: Mapping[int, Mapping[str, Any]], gone: Mapping[int, tuple[float, str]]
) -> list[str]:
    """``rank 1 (host b7): gone — no sign of life for 40 s (its node/agent stopped)``: one
    part per host and cause, the longest silence first, at most :data:`SHOWN_GROUPS`."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, (_, why) in gone.items():
        groups.setdefault((str(records[rank].get("host") or "?"), why), []).append(rank)
    ordered = sorted(
        groups.items(), key=lambda item: (-max(gone[r][0] for r in item[1]), min(item[1]))
    )
    parts = []
    for (host, why), ranks in ordered[:SHOWN_GROUPS]:
        age = max(gone[r][0] for r in ranks)
        whose = "its" if len(ranks) == 1 else "their"
        parts.append(
            f"{_ranks(ranks)} (host {host}): gone — no sign of life for {age:.0f} s ({whose} {why})"
        )
    rest = [r for _, ranks in ordered[SHOWN_GROUPS:] for r in ranks]
    if rest:
        hosts = len({host for (host, _), _ in ordered[SHOWN_GROUPS:]})
        parts.append(f"{len(rest):,} more rank(s) on {hosts:,} host(s) gone (--json lists them)")
    return parts


def _by_age(silent: Mapping[int, float]) -> list[tuple[float, list[int]]]:
    """Silent ranks grouped by their silence rounded to 10 s, the longest first."""
    groups: dict[float, list[int]] = {}
    for rank, age in silent.items():
        groups.setdefault(round(age, -1), []).append(rank)
    return sorted(((age, sorted(ranks)) for age, ranks in groups.items()), reverse=True)


def describe_rank(record: Mapping[str, Any], now: float | None = None) -> list[str]:
    """A few lines about one rank for ``trainmon hang``: step, collective, frames, files."""
    now = time.time() if now is None else now
    rank = record.get("rank")
    written = float(record.get("time", now))
    stalled = written - float(record.get("stalled_since") or written)
    via = ", via the job's store" if record.get("via") == "store" else ""
    seen = last_seen(record)
    lines = [
        f"rank {rank} ({record.get('host')}, pid {record.get('pid')}{via}): last step "
        f"{record.get('step')}, no step for {stalled:.0f} s when recorded "
        f"{now - written:.0f} s ago"
        + (f", last sign of life {now - seen:.0f} s ago" if seen is not None else "")
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
