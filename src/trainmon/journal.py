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
  :mod:`trainmon.aggregate`).

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

Readers must skip kinds they do not know; later versions only add kinds and keys.
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
    for value in values.values():
        if value - value != 0:  # NaN or ±Inf; 0 for every finite int or float
            return {k: (_non_finite_name(v) if v - v != 0 else v) for k, v in values.items()}
    return values


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


def read_journal(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield each record of a journal, decoding non-finite values.

    A line cut short by a killed process (the last line, or one followed by the ``meta``
    record of a restart) is skipped; a bad line elsewhere raises ``ValueError`` naming the
    file and line number.
    """
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL_FILE
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = len(lines) - 1
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
