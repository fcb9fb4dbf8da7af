"""A TensorBoard event-file writer that needs neither TensorFlow, torch nor ``tensorboard``.

The three protobuf messages involved (Event, Summary, Summary.Value) are tiny, so they are
encoded by hand: that keeps the import cheap and lets each scalar cost one dict lookup (its
pre-encoded tag) plus one ``struct.pack``. Records use TFRecord framing, so a file cut short by
a crash still yields every complete record to TensorBoard's reader.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from trainmon import extras
from trainmon.core.events import Extra, Histogram, Hparams, Number, StepScalars, Text
from trainmon.core.writer import Writer
from trainmon.writers.files import PENDING_BYTES, AppendFile, flush_due, flush_or_hold
from trainmon.writers.tb_summaries import (
    histogram_summary,
    hparams_summaries,
    text_summary,
    varint,
)

_FILE_VERSION = b"brain.Event:2"
_CRC_MASK_DELTA = 0xA282EAD8
_MAX_CACHED_LENGTHS = 4096

_pack_f = struct.Struct("<f").pack
_pack_q = struct.Struct("<Q").pack
_pack_i = struct.Struct("<I").pack
# Event.wall_time (field 1, fixed64) followed by the key of Event.step (field 2, varint).
_pack_head = struct.Struct("<BdB").pack
_WALL_TIME_KEY = 0x09
_STEP_KEY = 0x10
_FILE_VERSION_KEY = 0x1A  # Event.file_version, field 3, length-delimited
_SUMMARY_KEY = b"\x2a"  # Event.summary, field 5, length-delimited
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]

# Unique per process (like TensorBoard's own global uid) so two writers never share a file.
_file_counter = itertools.count()


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of an int64: negatives (and, like a C cast, anything past
    2**63) as 64-bit two's complement, which is what protobuf readers decode."""
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]
    return varint(value)


def _float32(value: Number) -> bytes:
    """Slow path for values ``struct`` refuses: beyond float32 range (or even float64's)."""
    try:
        as_float = float(value)
    except OverflowError:  # an int too large for a double
        as_float = math.inf if value > 0 else -math.inf
    try:
        return _pack_f(as_float)
    except OverflowError:  # finite double beyond float32 range: what a C cast gives
        return _pack_f(math.copysign(math.inf, as_float))


def _event_file_name(seconds: int | None = None) -> str:
    """TensorBoard's own naming, so its directory scanning and sorting treat it as native."""
    host = socket.gethostname().replace("/", "_")
    when = int(time.time()) if seconds is None else seconds
    return f"events.out.tfevents.{when:010d}.{host}.{os.getpid()}.{next(_file_counter)}"


def _latest_file_seconds(folder: Path) -> int:
    """The largest timestamp in the names of the event files in ``folder`` (0 when none)."""
    latest = 0
    for path in folder.glob("*tfevents*"):
        parts = path.name.split(".tfevents.", 1)[-1].split(".", 1)
        if parts[0].isdigit():
            latest = max(latest, int(parts[0]))
    return latest


def session_start_event(step: int, wall_time: float) -> bytes:
    """An unframed Event with ``session_log {status: START}`` at ``step``: TensorBoard's purge
    marker. Its reader, meeting it in a file of version ``brain.Event:2``, drops every event
    read before it whose step is ``>= step`` (the orphaned steps of a run that was cut short)."""
    # Event.session_log is field 7 (length-delimited); SessionLog.status (field 1) START = 1
    return _pack_head(_WALL_TIME_KEY, wall_time, _STEP_KEY) + _varint(step) + b"\x3a\x02\x08\x01"


class TensorBoardWriter(Writer):
    """Writes one TensorBoard Event per step, holding all that step's scalars."""

    kind = "tensorboard"
    _wrote = False

    def __init__(self, directory: Path | str) -> None:
        crc_module = extras.require("crc32c", "tensorboard", "The TensorBoard writer")
        self._crc32c: Callable[[bytes], int] = crc_module.crc32c
        self.folder = Path(directory)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.location = str(directory)
        self._prefixes: dict[str, bytes] = {}
        self._length_headers: dict[int, bytes] = {}
        self.path, self._file = self._open_file(None)
        self._closed = False

    def _open_file(self, seconds: int | None) -> tuple[Path, AppendFile]:
        """A new event file, valid and readable from the start (its version record flushed)."""
        path = self.folder / _event_file_name(seconds)
        while path.exists():  # a reused pid within the same second: never append to another run
            path = self.folder / _event_file_name(seconds)
        handle = AppendFile(path, PENDING_BYTES)
        version = _pack_head(_WALL_TIME_KEY, time.time(), _FILE_VERSION_KEY)
        version += _varint(len(_FILE_VERSION))
        handle.write_header(self._frame(version + _FILE_VERSION))  # kept while the disk is full
        flush_or_hold(handle)
        return path, handle

    def resume(self, step: int, identity: Mapping[str, object] | None) -> None:
        """Continue in a new event file that sorts after every event file of the folder (its
        name's timestamp is past theirs), starting with TensorBoard's purge marker at
        ``step``: TensorBoard then shows the steps ``>= step`` of the run that was cut short
        no more, and this run's instead. The file opened at start, holding only its version
        record when nothing was logged before the resume, is removed."""
        if self._closed:
            raise ValueError(f"TensorBoard writer for {self.location} is closed")
        old_path, old_file = self.path, self._file
        empty = old_file.size_at_open == 0 and old_file.buffered == 0 and not self._wrote
        old_file.close()
        if empty:
            with contextlib.suppress(OSError):
                old_path.unlink()
        seconds = max(int(time.time()), _latest_file_seconds(self.folder) + 1)
        self.path, self._file = self._open_file(seconds)
        self._file.write(self._frame(session_start_event(step, time.time())))
        self._file.flush()

    def write(self, records: Sequence[StepScalars]) -> None:
        if self._closed:
            raise ValueError(f"TensorBoard writer for {self.location} is closed")
        chunks: list[bytes] = []
        try:
            for record in records:
                chunks.append(self._encode(record))
        finally:  # keep the records encoded before a bad one
            values = sum(len(record.values) for record in records[: len(chunks)])
            self._file.write(b"".join(chunks), values)
            self._wrote = self._wrote or bool(chunks)
        if flush_due(self._file.buffered):
            self._file.flush()

    def write_extras(self, records: Sequence[Extra]) -> None:
        """Histograms, text (the text plugin) and hyper-parameters (the hparams plugin)."""
        if self._closed:
            raise ValueError(f"TensorBoard writer for {self.location} is closed")
        chunks: list[bytes] = []
        for record in records:
            if isinstance(record, Histogram):
                summaries = [histogram_summary(record)]
                step, wall_time = record.step, record.wall_time
            elif isinstance(record, Text):
                summaries = [text_summary(record.name, record.text)]
                step, wall_time = record.step, record.wall_time
            elif isinstance(record, Hparams):
                summaries = hparams_summaries(record.hparams, record.metrics, record.wall_time)
                step, wall_time = 0, record.wall_time  # as torch's add_hparams: run-level
            else:
                continue
            for summary in summaries:
                event = b"".join(
                    (
                        _pack_head(_WALL_TIME_KEY, wall_time, _STEP_KEY),
                        _varint(step),
                        _SUMMARY_KEY,
                        _varint(len(summary)),
                        summary,
                    )
                )
                chunks.append(self._frame(event))
        self._file.write(b"".join(chunks))

    def flush(self) -> None:
        self._file.flush()

    @property
    def dropped_events(self) -> int:
        return self._file.dropped

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._file.close()

    def _encode(self, record: StepScalars) -> bytes:
        """One framed Event: header, then a Summary built from cached tag prefixes."""
        summary = self._summary(record.values)
        event = b"".join(
            (
                _pack_head(_WALL_TIME_KEY, record.wall_time, _STEP_KEY),
                _varint(record.step),
                _SUMMARY_KEY,
                _varint(len(summary)),
                summary,
            )
        )
        return self._frame(event)

    def _summary(self, values: Mapping[str, Number]) -> bytes:
        get, add = self._prefixes.get, self._prefix
        try:
            return b"".join([(get(k) or add(k)) + _pack_f(v) for k, v in values.items()])
        except (OverflowError, struct.error):  # rare (e.g. an int beyond int64): slow path
            return b"".join([(get(k) or add(k)) + _float32(v) for k, v in values.items()])

    def _prefix(self, name: str) -> bytes:
        """Everything of a Summary.Value before its float: value key+length, tag, float key."""
        tag = name.encode("utf-8", "backslashreplace")  # lone surrogates: still valid UTF-8
        value = b"\x0a" + _varint(len(tag)) + tag + b"\x15"
        prefix = b"\x0a" + _varint(len(value) + 4) + value
        self._prefixes[name] = prefix
        return prefix

    def _frame(self, data: bytes) -> bytes:
        """TFRecord framing: length, masked CRC of the length, data, masked CRC of the data."""
        n = len(data)
        header = self._length_headers.get(n)
        if header is None:
            length = _pack_q(n)
            header = length + _pack_i(self._masked_crc(length))
            if len(self._length_headers) < _MAX_CACHED_LENGTHS:
                self._length_headers[n] = header
        return b"".join((header, data, _pack_i(self._masked_crc(data))))

    def _masked_crc(self, data: bytes) -> int:
        crc = self._crc32c(data)
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF
