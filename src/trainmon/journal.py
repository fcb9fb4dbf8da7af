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
step the resumed run logs. What earlier lines logged at ``step`` or later is orphaned (the run
that was cut short went past its checkpoint): :func:`read_journal`, ``summary`` and ``report``
leave out those ``scalars`` lines, and ``window`` lines whose ``last_step`` is ``>= step``, so
each step is seen once and the later run wins.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
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


def _starts_a_run(line: bytes) -> bool:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict) and record.get("kind") == "meta"


RESUME_KIND = "resume"
_RESUME_MARK = b'"resume"'


_SCAN_CHUNK = 1 << 20


def _marked_lines(f: Any) -> Iterator[bytes]:
    """Each line of ``f``, with the lines that cannot hold a resume record emptied (cheap)."""
    for line in f:
        yield line if _RESUME_MARK in line else b""


class ResumeCutoffs:
    """Which lines a later ``resume`` record orphaned: :meth:`at` gives, for a line number
    (asked in increasing order), the lowest step that a resume record after it starts again
    from (``math.inf`` when none does)."""

    def __init__(self, lines: list[bytes], data: bytes | None = None) -> None:
        """``data``, the file the lines were split from, lets a journal without any resume
        record skip the scan of its lines (one search of the whole file instead)."""
        marks: list[tuple[int, int]] = []
        scan = data is None or _RESUME_MARK in data
        for number, line in enumerate(lines if scan else ()):
            if _RESUME_MARK in line:
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(record, dict) or record.get("kind") != RESUME_KIND:
                    continue
                step = record.get("step")
                if type(step) is int:
                    marks.append((number, step))
        self._lines = [number for number, _ in marks]
        lowest: list[float] = [math.inf] * (len(marks) + 1)
        for i in range(len(marks) - 1, -1, -1):
            lowest[i] = min(marks[i][1], lowest[i + 1])
        self._lowest = lowest
        self._next = 0

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ResumeCutoffs:
        """The cutoffs of a journal read as a stream (for readers that never hold the whole
        file): one chunked search for a resume record, and a pass over the lines only when
        there is one. Line numbers are 0-based, as the file's lines come."""
        found = False
        tail = b""
        with open(path, "rb") as f:
            while chunk := f.read(_SCAN_CHUNK):
                if _RESUME_MARK in tail + chunk[: len(_RESUME_MARK)] or _RESUME_MARK in chunk:
                    found = True
                    break
                tail = chunk[-len(_RESUME_MARK) :]
        if not found:
            return cls([], b"")
        with open(path, "rb") as f:
            return cls(list(_marked_lines(f)))

    def __bool__(self) -> bool:
        return bool(self._lines)

    def at(self, number: int) -> float:
        """The cutoff step for line ``number`` (0-based); numbers must not decrease."""
        lines = self._lines
        while self._next < len(lines) and lines[self._next] <= number:
            self._next += 1
        return self._lowest[self._next]


def orphaned(record: Mapping[str, Any], cutoff: float) -> bool:
    """True for a ``scalars`` or ``window`` record at or past ``cutoff`` (see ``resume``)."""
    kind = record.get("kind")
    if kind == "scalars":
        step = record.get("step")
    elif kind == "window":
        step = record.get("last_step")
    else:
        return False
    return isinstance(step, int) and step >= cutoff


def read_journal(
    path: str | os.PathLike[str], *, keep_orphaned: bool = False
) -> Iterator[dict[str, Any]]:
    """Yield each record of a journal, decoding non-finite values.

    A line cut short by a killed process (the last line, or one followed by the ``meta``
    record of a restart) is skipped; a bad line elsewhere raises ``ValueError`` naming the
    file and line number. Records orphaned by a later ``resume`` record (a run resumed from
    a checkpoint) are left out, so each step comes from the run that logged it last, unless
    ``keep_orphaned`` (for readers of the attempts themselves: the work a restart redid).
    """
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL_FILE
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    last = len(lines) - 1
    cutoffs = ResumeCutoffs(lines, data)
    del data
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if number == last or _starts_a_run(lines[number + 1]):
                continue  # cut short by a killed process (then possibly restarted)
            raise ValueError(f"{path}:{number + 1}: not a JSON object: {exc}") from exc
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number + 1}: expected a JSON object")
        if cutoffs and not keep_orphaned and orphaned(record, cutoffs.at(number)):
            continue
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
        yield record
