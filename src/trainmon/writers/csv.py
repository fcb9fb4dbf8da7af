"""DeepSpeed's ``csv_monitor`` layout, without reopening a file per event.

One file per metric in ``<output_path>/<job_name>/``, named after the metric with ``/`` and
spaces replaced by ``_``, header ``step,<last name component>``. A run restarted into the same
folder appends to the existing files without a second header.

Names that map to the same file (``a/b``, ``a_b``, ``a b``) get distinct files: the first
one seen keeps the plain name, the others get a short hash. Which name owns which file is
recorded in ``.trainmon-csv-names.jsonl`` (one ``{"name": ..., "file": ...}`` line per file,
append-only) before the file gets its first row, so a restarted run, whatever order it logs
in, writes each name to the file it had before.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import orjson

from trainmon.core.events import Number, StepScalars, same_name_runs
from trainmon.core.writer import Writer
from trainmon.writers.files import (
    NO_SPACE,
    PENDING_BYTES,
    AppendFile,
    flush_due,
    inside,
    safe_file_name,
)

MAX_OPEN_FILES = 64
NAMES_FILE = ".trainmon-csv-names.jsonl"
_PENDING_PER_FILE = PENDING_BYTES // 16  # up to MAX_OPEN_FILES of them are held at once


def _csv_field(text: str) -> str:
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _column_rows(steps: Sequence[bytes], column: Sequence[Number]) -> bytes:
    """``step,value`` lines for one metric, each value as Python's ``repr`` writes it (every
    digit of a float; NaN and Inf as Python spells them, as DeepSpeed's files have them).

    One ``orjson.dumps`` formats the whole column in C, about three times faster than a
    ``repr`` per value. Its text equals ``repr``'s except for exponents of small numbers
    (``1e-05`` is ``0.00001`` there, ``1.5e-07`` is ``1.5e-7``), non-finite values (``null``)
    and bools: a column whose text holds ``e-``, ``.0000`` or anything but digits, signs,
    points, exponents and commas is formatted with ``repr`` instead, so the bytes are the
    same either way.
    """
    try:
        text = orjson.dumps(column)
    except TypeError:  # an int beyond 64 bits, a type orjson does not know
        text = b""
    if not text or b"e-" in text or b".0000" in text or text[1:-1].translate(None, _NUMBER_BYTES):
        return "".join(
            [f"{step.decode()},{value!r}\n" for step, value in zip(steps, column, strict=True)]
        ).encode()
    return b"\n".join(map(_COMMA.join, zip(steps, text[1:-1].split(b","), strict=True))) + b"\n"


_COMMA = b","
_NUMBER_BYTES = b"0123456789.,+-e"


def read_name_map(directory: Path | str) -> dict[str, str]:
    """``{metric name: file name}`` as recorded in a CSV folder (empty when none is)."""
    owners: dict[str, str] = {}
    try:
        with open(Path(directory) / NAMES_FILE, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return owners
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:  # a line cut short by a crash: that file got no row
            continue
        if isinstance(entry, dict):
            name, file_name = entry.get("name"), entry.get("file")
            if isinstance(name, str) and isinstance(file_name, str):
                owners.setdefault(name, file_name)
    return owners


class CsvWriter(Writer):
    """One CSV per metric; at most ``MAX_OPEN_FILES`` kept open, least recently used closed."""

    kind = "csv"

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.location = str(self.directory)
        self._paths: dict[str, Path] = {}
        self._files = read_name_map(self.directory)  # metric name -> file name
        self._owners = {file: name for name, file in reversed(self._files.items())}
        self._open: OrderedDict[str, AppendFile] = OrderedDict()
        self._buffered = 0
        self._dropped = 0  # values of files already closed, or that could not be opened
        self._deferred: Exception | None = None
        self._unrecorded: list[bytes] = []  # names-file lines a full disk refused, in order

    def _path_for(self, name: str) -> Path:
        file_name = self._files.get(name)
        if file_name is None:
            file_name = safe_file_name(name, ".csv")
            owner = self._owners.get(file_name)
            if owner is None and (self.directory / file_name).exists():
                owner = name  # a file from before names were recorded: first come, first kept
            if owner is not None and owner != name:  # "a/b" and "a_b": keep them apart
                digest = hashlib.sha1(name.encode()).hexdigest()[:8]
                file_name = safe_file_name(f"{name}-{digest}", ".csv")
            self._record(name, file_name)
        path = inside(self.directory, file_name)
        self._paths[name] = path
        return path

    def _record(self, name: str, file_name: str) -> None:
        """Write down (durably, before any row) that ``file_name`` belongs to ``name``; out
        of space, the line is held and written before the next flush of any row."""
        line = orjson.dumps({"name": name, "file": file_name}) + b"\n"
        try:
            self._append_names(b"".join(self._unrecorded) + line)
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            self._unrecorded.append(line)
        else:
            self._unrecorded.clear()
        self._files[name] = file_name
        self._owners[file_name] = name

    def _append_names(self, line: bytes) -> None:
        fd = os.open(self.directory / NAMES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(f"short write to {NAMES_FILE}")
            except OSError:
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)

    def _file(self, name: str) -> AppendFile:
        handle = self._open.get(name)
        if handle is not None:
            self._open.move_to_end(name)
            return handle
        path = self._paths.get(name) or self._path_for(name)
        handle = AppendFile(path, _PENDING_PER_FILE)
        if handle.size_at_open == 0:
            header = name.rsplit("/", 1)[-1]
            handle.write_header(f"step,{_csv_field(header)}\n".encode())
        elif not handle.ends_with_newline():
            handle.write(b"\n")
        self._open[name] = handle
        if len(self._open) > MAX_OPEN_FILES:
            _, oldest = self._open.popitem(last=False)
            self._close_file(oldest)
        return handle

    def _close_file(self, handle: AppendFile) -> None:
        try:
            handle.close()  # closes the descriptor even when the final flush fails
        except Exception as exc:
            self._deferred = self._deferred or exc
        self._dropped += handle.dropped

    def write(self, records: Sequence[StepScalars]) -> None:
        lines: dict[str, list[bytes]] = {}
        counts: dict[str, int] = {}
        for names, run in same_name_runs(records):  # column by column: a file per name
            steps = [str(record.step).encode() for record in run]
            columns = zip(*[record.values.values() for record in run], strict=True)
            for name, column in zip(names, columns, strict=True):
                rows = _column_rows(steps, column)
                earlier = lines.get(name)
                if earlier is None:
                    lines[name] = [rows]
                    counts[name] = len(steps)
                else:
                    earlier.append(rows)
                    counts[name] += len(steps)
        error: Exception | None = None
        for name, chunks in lines.items():
            data = b"".join(chunks)
            try:
                self._file(name).write(data, counts[name])
            except Exception as exc:  # one metric's file must not cost the others their rows
                error = error or exc
                self._dropped += counts[name]
                continue
            self._buffered += len(data)
        if flush_due(self._buffered):
            self.flush()
        error = error or self._deferred
        self._deferred = None
        if error is not None:
            raise error

    @property
    def dropped_events(self) -> int:
        return self._dropped + sum(handle.dropped for handle in self._open.values())

    def flush(self) -> None:
        self._buffered = 0
        error: Exception | None = self._deferred
        self._deferred = None
        if self._unrecorded:  # names first: no row reaches a file its name is not written for
            held = b"".join(self._unrecorded)
            try:
                self._append_names(held)
            except OSError as exc:
                for handle in self._open.values():
                    if handle.buffered > _PENDING_PER_FILE:
                        handle.give_up()
                raise exc from None
            self._unrecorded.clear()
        for handle in list(self._open.values()):
            try:
                handle.flush()
            except Exception as exc:  # flush the other files anyway, then report
                error = error or exc
        if error is not None:
            raise error

    def close(self) -> None:
        while self._open:
            _, handle = self._open.popitem(last=False)
            self._close_file(handle)
        error, self._deferred = self._deferred, None
        if error is not None:
            raise error
