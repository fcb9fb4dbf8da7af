"""The JSONL journal: schema, encoding and a crash-tolerant reader.

Schema version 1, one JSON object per line, append-only:

* ``{"v": 1, "kind": "meta", "time": <unix s>, "job": str, "rank": int, "world_size": int,
  "pid": int, "host": str, "trainmon": str}`` — written each time a writer opens the file
  (a restarted run appends a new one).
* ``{"v": 1, "kind": "scalars", "step": int, "time": <unix s>, "values": {name: number}}`` —
  values logged for one step. A step may have several such lines (values logged later, or
  the cross-rank statistics added at a window's last step): readers merge them. Non-finite
  numbers are the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` so the file stays
  valid JSON and NaN stays distinct from a missing value.
* ``{"v": 1, "kind": "window", "first_step": int, "last_step": int, "start_time": <unix s>,
  "end_time": <unix s>, "stats": {name: {"count": int, "mean": n, "min": n, "max": n,
  "last": n}}}`` — the aggregate of one window (``steps_per_print`` steps by default), written
  after that window's ``scalars`` lines. For a rate metric (``perf/samples_per_sec``, any
  ``*_per_sec``, ...) ``mean`` is the window's work over its time (see
  :mod:`trainmon.core.aggregate`).

* ``{"v": 1, "kind": "histogram", "name": str, "step": int, "time": <unix s>, "edges":
  [n, ...], "counts": [int, ...], "min": n, "max": n, "num": int, "sum": n, "sum_squares": n,
  "non_finite": int}`` — one :meth:`~trainmon.Monitor.log_histogram` call: ``len(edges) ==
  len(counts) + 1`` equal-width buckets over the finite values; ``num``/``sum``/
  ``sum_squares`` cover those, NaN and ±Inf are counted in ``non_finite``.
* ``{"v": 1, "kind": "text", "name": str, "step": int, "time": <unix s>, "text": str}`` —
  one :meth:`~trainmon.Monitor.log_text` call.
* ``{"v": 1, "kind": "hparams", "step": int, "time": <unix s>, "hparams": {key: str | number
  | bool}, "metrics": {name: number}}`` — the run's hyper-parameters (flat ``a.b`` keys), part
  of the run's description like ``meta``; a later one adds to and overrides an earlier one.

What ``trainmon goodput`` reads of each attempt (one process's run; restarts into the same
folder append new attempts):

* ``meta`` carries ``"attempt": str``, an id of this attempt; its ``time`` is the attempt's start
  (the writer opens the file while the Monitor is created).
* ``{"v": 1, "kind": "span", "what": "checkpoint_save" | "checkpoint_load" | "eval", "step":
  int, "start_time": <unix s>, "end_time": <unix s>}`` — a checkpoint saved or loaded (timed
  by the engine, ``attach`` and ``Monitor.span``), or an evaluation.
* ``{"v": 1, "kind": "heartbeat", "time": <unix s>}`` — written at a flush when no other line
  was for a second: with the lines of each step, the last sign of life of a process killed
  with ``kill -9`` is known to within one flush interval (``trainmon.flush_interval_s``).
* ``{"v": 1, "kind": "end", "time": <unix s>, "step": int, "status": "success" | "failed" |
  "aborted", "stop_reason": str | null}`` — written by ``Monitor.close``; ``stop_reason`` names
  the alert that stopped the run. A killed attempt has none.

Readers must skip kinds they do not know; later versions only add kinds and keys.

A run resumed from a checkpoint (see ``Monitor.load_state_dict``) writes, after its ``meta``
line, ``{"v": 1, "kind": "resume", "step": int, "time": <unix s>}``: ``step`` is the first
step the resumed run logs.

Every reader shows one surviving timeline: an attempt that starts at step ``s`` (its
``resume`` step, else the step of its first ``scalars`` line, so a restart from scratch at
step 1 counts too) replaces what the earlier attempts logged at ``s`` and later.
:func:`read_journal`, ``summary``, ``compare``, ``report``, ``tail``, ``sync`` and ``goodput``
leave out those ``scalars``, ``histogram`` and ``text`` lines, and ``window`` lines whose
``last_step`` is ``>= s``, so each step is seen once and the later attempt wins
(:class:`Timeline`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

SCHEMA_VERSION = 1
JOURNAL_FILE = "metrics.jsonl"

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_OPTIONS = orjson.OPT_APPEND_NEWLINE


def _non_finite_name(value: float) -> str:
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def encode_values(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` with NaN/±Inf replaced by their string names (a copy only when needed)."""
    total = sum(values.values())  # finite when every value is (one C call, not a loop)
    if total - total == 0:
        return values
    if any(value - value != 0 for value in values.values()):  # NaN or ±Inf somewhere
        return {k: (_non_finite_name(v) if v - v != 0 else v) for k, v in values.items()}
    return values  # finite values whose total is beyond a double


def encode_line(obj: Mapping[str, Any]) -> bytes:
    """One journal line; ints beyond 64 bits fall back to the standard library encoder."""
    try:
        return orjson.dumps(obj, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return (json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n").encode()


def decode_value(value: Any) -> Any:
    """The number a journal value stands for (turns ``"NaN"`` back into ``nan``)."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    return value


RESUME_KIND = "resume"
_RESUME_MARK = b'"resume"'
_META_MARK = b'"meta"'
_SCALARS_MARK = b'"scalars"'
_META_LINE = b'"kind":"meta"'

_SCAN_CHUNK = 1 << 20


def journal_lines(
    path: str | os.PathLike[str], chunk: int = _SCAN_CHUNK
) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, line)`` of every line of a file, read ``chunk`` bytes at a time (a few
    MB in memory whatever the file's size); a last line without its newline comes too."""
    offset = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                break
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield offset, line
                offset += len(line) + 1
    if rest:
        yield offset, rest


def json_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object on ``line``; None for anything else (a damaged or cut line)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _mentions(path: str | os.PathLike[str]) -> tuple[int, bool]:
    """How many lines may start an attempt (up to 2) and whether one may resume: one chunked
    byte search, so a journal of one attempt never needs a pass over its lines."""
    metas, resumed, tail = 0, False, b""
    keep = max(len(_META_MARK), len(_RESUME_MARK)) - 1
    with open(path, "rb") as f:
        while chunk := f.read(_SCAN_CHUNK):
            data = tail + chunk
            metas += data.count(_META_MARK) - tail.count(_META_MARK)
            resumed = resumed or _RESUME_MARK in data
            if resumed or metas >= 2:
                break
            tail = data[-keep:]
    return metas, resumed


def attempts_in(path: str | os.PathLike[str]) -> int:
    """How many attempts (``meta`` lines) a journal holds, counted up to 2 by a chunked byte
    search: enough to tell a restarted run from a single one without reading it."""
    metas, tail = 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(_SCAN_CHUNK):
            data = tail + chunk
            metas += data.count(_META_LINE) - tail.count(_META_LINE)
            if metas >= 2:
                break
            tail = data[-(len(_META_LINE) - 1) :]
    return metas


class Timeline:
    """The surviving timeline of a journal: which records a later attempt replaced.

    An attempt that starts at step ``s`` (its ``resume`` record's step, else the step of its
    first ``scalars`` line) replaces what the earlier attempts logged at ``s`` and later: a
    resume from a checkpoint and a restart from scratch follow the one rule. :meth:`at` gives,
    for a line number (0-based, asked in increasing order), the lowest start step of the
    attempts written after it (``math.inf`` when none replaces anything).
    """

    def __init__(self, lines: Iterable[bytes]) -> None:
        marks: list[tuple[int, int]] = []
        opened: int | None = None  # the line of an attempt whose start step is not known yet
        started = False  # the first attempt replaces nothing
        for number, line in enumerate(lines):
            if opened is not None and _SCALARS_MARK in line:
                record = json_object(line)
                if record is not None and record.get("kind") == "scalars":
                    step = record.get("step")
                    if type(step) is int:
                        marks.append((opened, step))
                        opened = None
            if _META_MARK in line:
                record = json_object(line)
                if record is not None and record.get("kind") == "meta":
                    opened = number if started else None
                    started = True
            elif _RESUME_MARK in line:
                record = json_object(line)
                if record is not None and record.get("kind") == RESUME_KIND:
                    step = record.get("step")
                    if type(step) is int:
                        marks.append((number, step))
                        opened = None
        self._lines = [number for number, _ in marks]
        lowest: list[float] = [math.inf] * (len(marks) + 1)
        for i in range(len(marks) - 1, -1, -1):
            lowest[i] = min(marks[i][1], lowest[i + 1])
        self._lowest = lowest
        self._next = 0

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Timeline:
        """The timeline of a journal read as a stream: one chunked byte search, and a pass
        over the lines (holding none of them) only when it holds a restart or a resume."""
        metas, resumed = _mentions(path)
        if metas < 2 and not resumed:
            return cls(())
        return cls(line for _, line in journal_lines(path))

    def __bool__(self) -> bool:
        return bool(self._lines)

    def at(self, number: int) -> float:
        """The cutoff step for line ``number`` (0-based); numbers must not decrease."""
        lines = self._lines
        while self._next < len(lines) and lines[self._next] <= number:
            self._next += 1
        return self._lowest[self._next]


#: A wall-clock step back between two ``scalars`` lines larger than this is a clock jump (the
#: lines come in the order their values were logged, so their times only rise otherwise).
CLOCK_STEP_BACK_S = 1.0
#: A disagreement between the wall and monotonic clocks larger than this is a clock jump.
CLOCK_DRIFT_S = 1.0
_TIME_KEYS = ("time", "start_time", "end_time", "process_start", "launcher_start", "job_start")


class ClockMend:
    """Keeps a journal's times on one continuous clock when the wall clock jumped (an NTP
    correction, a VM resumed), so that no duration read from them is negative or inflated.

    ``meta`` and ``heartbeat`` lines carry ``mono`` (the monotonic clock): where they do, the
    elapsed time between them is the monotonic difference, whatever the wall clock said. A
    ``scalars`` line whose time is earlier than the previous one's is a jump back, mended at
    once. :meth:`mend` shifts a record's times in place; :attr:`jumps` lists each jump as
    ``(mended time, seconds)`` (negative: the clock went back).
    """

    def __init__(self) -> None:
        self.shift = 0.0
        self.jumps: list[tuple[float, float]] = []
        self._reference: tuple[float, float] | None = None  # (mended time, mono) of the attempt
        self._last_scalars = -math.inf

    def mend(self, record: dict[str, Any]) -> None:
        """Shift ``record``'s times onto the continuous clock (a record without one: as is)."""
        t = record.get("time")
        kind = record.get("kind")
        if isinstance(t, int | float):
            mono = record.get("mono")
            if isinstance(mono, int | float):
                if kind == "meta":  # a new process: its own monotonic clock
                    self._check_back(t)
                    self._reference = (t + self.shift, mono)
                elif self._reference is not None:
                    expected = self._reference[0] + (mono - self._reference[1])
                    if abs(expected - (t + self.shift)) > CLOCK_DRIFT_S:
                        self._jumped(t, expected - t)
                    self._last_scalars = min(self._last_scalars, expected)
            elif kind == "scalars":
                self._check_back(t)
                self._last_scalars = t + self.shift
        if self.shift:
            for key in _TIME_KEYS:
                value = record.get(key)
                if isinstance(value, int | float):
                    record[key] = value + self.shift

    def _check_back(self, t: float) -> None:
        if t + self.shift < self._last_scalars - CLOCK_STEP_BACK_S:
            self._jumped(t, self._last_scalars - t)

    def _jumped(self, t: float, shift: float) -> None:
        self.jumps.append((t + shift, self.shift - shift))
        self.shift = shift

    def describe(self) -> str:
        """One sentence for a reader's notes ("" when the clock never jumped)."""
        if not self.jumps:
            return ""
        sizes = [size for _, size in self.jumps]
        biggest = max(sizes, key=abs)
        way = "back" if biggest < 0 else "forward"
        more = f" ({len(sizes)} jumps in all)" if len(sizes) > 1 else ""
        return (
            f"the wall clock jumped {way} by {_span(abs(biggest))}{more} while the run was "
            "written; durations are measured across the jump as if it had not happened"
        )


def _span(seconds: float) -> str:
    if seconds >= 3590:  # a jump seen between two lines is short of its size by their gap
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


_STEPPED_KINDS = frozenset({"scalars", "histogram", "text"})


def orphaned(record: Mapping[str, Any], cutoff: float) -> bool:
    """True for a record of a step at or past ``cutoff`` (``scalars``, ``histogram``, ``text``;
    a ``window`` by its ``last_step``): a later attempt replaced it (see :class:`Timeline`)."""
    kind = record.get("kind")
    if kind in _STEPPED_KINDS:
        step = record.get("step")
    elif kind == "window":
        step = record.get("last_step")
    else:
        return False
    return isinstance(step, int) and step >= cutoff


def read_journal(
    path: str | os.PathLike[str],
    *,
    keep_orphaned: bool = False,
    damaged: list[int] | None = None,
    clock: ClockMend | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield each record of a journal, decoding non-finite values, reading it as a stream.

    A line cut short by a killed process (the last line, or one followed by the ``meta``
    record of a restart) is skipped. A bad line elsewhere raises ``ValueError`` naming the
    file and line number, unless ``damaged`` is given: then its line number (1-based) is
    appended there and reading goes on. Records a later attempt replaced (see
    :class:`Timeline`) are left out, so each step comes from the attempt that logged it last,
    unless ``keep_orphaned`` (for readers of the attempts themselves: the work a restart redid).
    With ``clock``, times are mended across wall-clock jumps (see :class:`ClockMend`).
    """
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL_FILE
    timeline = Timeline.from_file(path) if not keep_orphaned else Timeline(())
    pending: tuple[int, str] | None = None  # an unreadable line, judged by the next one
    for number, (_, line) in enumerate(journal_lines(path)):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            record, problem = None, f"not a JSON object: {exc}"
        else:
            problem = "" if isinstance(record, dict) else "expected a JSON object"
        if pending is not None:
            starts = record is not None and problem == "" and record.get("kind") == "meta"
            if not starts:  # not cut short by a kill: damaged
                _damaged(path, pending, damaged)
            pending = None
        if problem:
            pending = (number + 1, problem)
            continue
        assert record is not None
        if clock is not None:
            clock.mend(record)
        if timeline and orphaned(record, timeline.at(number)):
            continue
        yield _decoded(record)


def _damaged(path: Path, found: tuple[int, str], damaged: list[int] | None) -> None:
    if damaged is None:
        raise ValueError(f"{path}:{found[0]}: {found[1]}")
    damaged.append(found[0])


def _decoded(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the non-finite names of its values turned back into floats."""
    values = record.get("values")
    if isinstance(values, dict):
        record["values"] = {k: decode_value(v) for k, v in values.items()}
    kind = record.get("kind")
    if kind == "histogram":
        for key in ("min", "max", "sum", "sum_squares"):
            if key in record:
                record[key] = decode_value(record[key])
    elif kind == "hparams":
        for key in ("hparams", "metrics"):
            found = record.get(key)
            if isinstance(found, dict):
                record[key] = {k: decode_value(v) for k, v in found.items()}
    stats = record.get("stats")
    if isinstance(stats, dict):
        record["stats"] = {
            name: {k: decode_value(v) for k, v in s.items()} if isinstance(s, dict) else s
            for name, s in stats.items()
        }
    return record
