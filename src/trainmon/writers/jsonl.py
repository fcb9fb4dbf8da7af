"""The JSONL journal writer: ``<output_path>/<job_name>/metrics.jsonl``.

The schema is documented in :mod:`trainmon.journal`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import AttemptEnd, Extra, Histogram, Hparams, Span, StepScalars, Text
from trainmon.core.process import claim_starts
from trainmon.core.writer import Writer
from trainmon.journal import JOURNAL_FILE, SCHEMA_VERSION, encode_line, encode_values
from trainmon.version import __version__
from trainmon.writers.files import PENDING_BYTES, AppendFile, flush_due, flush_or_hold

#: Seconds between ``heartbeat`` lines (written at a flush): a sign of life, and the monotonic
#: clock beside the wall clock, so that readers see through a wall clock that jumps.
HEARTBEAT_S = 1.0


class JsonlWriter(Writer):
    """One line per step, appended; readable while written, and after a crash.

    Each process that opens the file starts an *attempt* (its ``meta`` line, with a fresh
    ``attempt`` id); a flush at least a second after the last adds a ``heartbeat`` line, so
    the last sign of life of a killed process is known to within one flush interval.
    """

    kind = "jsonl"

    def __init__(
        self,
        directory: Path | str,
        job: str = "",
        rank: int = 0,
        world_size: int = 1,
        starts: Mapping[str, float] | None = None,
    ):
        """``starts``: when this attempt's process (and launcher) began, as the Monitor
        claimed them (:func:`trainmon.core.process.claim_starts`); None claims them here."""
        path = Path(directory) / JOURNAL_FILE
        self.location = str(path)
        self._file = AppendFile(path, PENDING_BYTES)
        if not self._file.ends_with_newline():
            self._file.write(b"\n")  # a previous run was killed mid-line: start clean
        meta = {
            "v": SCHEMA_VERSION,
            "kind": "meta",
            "time": time.time(),
            "job": job,
            "rank": rank,
            "world_size": world_size,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "trainmon": __version__,
            "attempt": uuid.uuid4().hex[:12],
            "mono": time.monotonic(),
            **(claim_starts() if starts is None else starts),
        }
        self._file.write_header(encode_line(meta))  # kept while the disk is full
        flush_or_hold(self._file)
        self._last_beat = time.monotonic()

    def write(self, records: Sequence[StepScalars]) -> None:
        out = self._file
        for record in records:
            out.write(
                encode_line(
                    {
                        "v": SCHEMA_VERSION,
                        "kind": "scalars",
                        "step": record.step,
                        "time": record.wall_time,
                        "values": encode_values(record.values),
                    }
                ),
                len(record.values),
            )
        if flush_due(out.buffered):
            out.flush()

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        for window in windows:
            try:  # orjson writes the dataclasses itself, in C
                line = _window_line(window, window.metrics)
            except TypeError:  # an int beyond 64 bits: the standard encoder knows no dataclass
                line = b"null"
            if b"null" in line:  # a NaN or ±Inf (orjson's null), or a name holding "null"
                stats = {
                    name: encode_values(
                        {
                            "count": m.count,
                            "mean": m.mean,
                            "min": m.min,
                            "max": m.max,
                            "last": m.last,
                        }
                    )
                    for name, m in window.metrics.items()
                }
                line = _window_line(window, stats)
            self._file.write(line)

    def write_extras(self, records: Sequence[Extra]) -> None:
        """``histogram``, ``text``, ``hparams``, ``span`` and ``end`` lines (see
        :mod:`trainmon.journal`)."""
        for record in records:
            line = extra_line(record)
            if line is not None:
                self._file.write(encode_line(line))

    def caught_up(self) -> None:
        """The end of a drain's batch: hand the lines to the OS now (one ``write``), so that a
        ``kill -9`` loses at most one drain interval of the journal, not a flush interval. A
        failure is left to the periodic :meth:`flush`, which retries and reports it."""
        with contextlib.suppress(OSError):
            self._file.flush()

    def flush(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_S:
            self._last_beat = now
            heartbeat = {"v": SCHEMA_VERSION, "kind": "heartbeat", "time": time.time(), "mono": now}
            self._file.write(encode_line(heartbeat))
        self._file.flush()

    @property
    def dropped_events(self) -> int:
        return self._file.dropped

    def close(self) -> None:
        self._file.close()

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:
        """Write the journal's ``resume`` record: readers drop what earlier lines logged at
        ``step`` and later (see :mod:`trainmon.journal`)."""
        record = {"v": SCHEMA_VERSION, "kind": "resume", "step": step, "time": time.time()}
        self._file.write(encode_line(record))
        self._file.flush()


def extra_line(record: Extra) -> dict[str, object] | None:
    """The journal object of a histogram, text or hyper-parameters record."""
    if isinstance(record, Histogram):
        return {
            "v": SCHEMA_VERSION,
            "kind": "histogram",
            "name": record.name,
            "step": record.step,
            "time": record.wall_time,
            "edges": list(record.edges),
            "counts": list(record.counts),
            **encode_values(
                {
                    "min": record.min,
                    "max": record.max,
                    "num": record.num,
                    "sum": record.sum,
                    "sum_squares": record.sum_squares,
                    "non_finite": record.non_finite,
                }
            ),
        }
    if isinstance(record, Text):
        return {
            "v": SCHEMA_VERSION,
            "kind": "text",
            "name": record.name,
            "step": record.step,
            "time": record.wall_time,
            "text": record.text,
        }
    if isinstance(record, Span):
        return {
            "v": SCHEMA_VERSION,
            "kind": "span",
            "what": record.kind,
            "step": record.step,
            "start_time": record.start_time,
            "end_time": record.end_time,
        }
    if isinstance(record, AttemptEnd):
        return {
            "v": SCHEMA_VERSION,
            "kind": "end",
            "time": record.wall_time,
            "step": record.step,
            "status": record.status,
            "stop_reason": record.stop_reason,
        }
    if isinstance(record, Hparams):
        return {
            "v": SCHEMA_VERSION,
            "kind": "hparams",
            "step": record.step,
            "time": record.wall_time,
            "hparams": {
                k: v if isinstance(v, str) else encode_values({k: v})[k]
                for k, v in record.hparams.items()
            },
            "metrics": encode_values(record.metrics),
        }
    return None


def _window_line(window: WindowStats, stats: Mapping[str, Any]) -> bytes:
    return encode_line(
        {
            "v": SCHEMA_VERSION,
            "kind": "window",
            "first_step": window.first_step,
            "last_step": window.last_step,
            "start_time": window.start_time,
            "end_time": window.end_time,
            "stats": stats,
        }
    )
