"""DeepSpeed's ``csv_monitor`` layout, without reopening a file per event.

One file per metric in ``<output_path>/<job_name>/``, named after the metric with ``/`` and
spaces replaced by ``_``, header ``step,<last name component>``. A run restarted into the same
folder appends to the existing files without a second header.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from trainmon.events import Number, StepScalars
from trainmon.writers.base import Writer
from trainmon.writers.files import AppendFile, inside, safe_file_name

MAX_OPEN_FILES = 64
_FLUSH_AT_BYTES = 1 << 20


def _csv_field(text: str) -> str:
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def format_number(value: Number) -> str:
    """Exact text for a number: ``repr`` keeps every float digit; NaN/Inf as Python spells them."""
    return repr(value) if isinstance(value, float) else str(value)


class CsvWriter(Writer):
    """One CSV per metric; at most ``MAX_OPEN_FILES`` kept open, least recently used closed."""

    kind = "csv"

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.location = str(self.directory)
        self._paths: dict[str, Path] = {}
        self._owners: dict[str, str] = {}  # file name -> metric name, to avoid collisions
        self._open: OrderedDict[str, AppendFile] = OrderedDict()
        self._buffered = 0

    def _path_for(self, name: str) -> Path:
        file_name = safe_file_name(name, ".csv")
        owner = self._owners.setdefault(file_name, name)
        if owner != name:  # "a/b" and "a_b" would share a file: keep them apart
            digest = hashlib.sha1(name.encode()).hexdigest()[:8]
            file_name = safe_file_name(f"{name}-{digest}", ".csv")
            self._owners[file_name] = name
        path = inside(self.directory, file_name)
        self._paths[name] = path
        return path

    def _file(self, name: str) -> AppendFile:
        handle = self._open.get(name)
        if handle is not None:
            self._open.move_to_end(name)
            return handle
        path = self._paths.get(name) or self._path_for(name)
        handle = AppendFile(path)
        if handle.size_at_open == 0:
            header = name.rsplit("/", 1)[-1]
            handle.write(f"step,{_csv_field(header)}\n".encode())
        elif not handle.ends_with_newline():
            handle.write(b"\n")
        self._open[name] = handle
        if len(self._open) > MAX_OPEN_FILES:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return handle

    def write(self, records: Sequence[StepScalars]) -> None:
        lines: dict[str, list[str]] = {}
        for record in records:
            step = str(record.step)
            for name, value in record.values.items():
                lines.setdefault(name, []).append(f"{step},{format_number(value)}\n")
        error: Exception | None = None
        for name, rows in lines.items():
            data = "".join(rows).encode()
            try:
                self._file(name).write(data)
            except Exception as exc:  # one metric's file must not cost the others their rows
                error = error or exc
                continue
            self._buffered += len(data)
        if self._buffered > _FLUSH_AT_BYTES:
            self.flush()
        if error is not None:
            raise error

    def flush(self) -> None:
        self._buffered = 0
        error: Exception | None = None
        for handle in list(self._open.values()):
            try:
                handle.flush()
            except Exception as exc:  # flush the other files anyway, then report
                error = error or exc
        if error is not None:
            raise error

    def close(self) -> None:
        error: Exception | None = None
        while self._open:
            _, handle = self._open.popitem(last=False)
            try:
                handle.close()  # closes the descriptor even when the final flush fails
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
