"""Append-only files written in whole chunks, and output paths that cannot escape their folder.

Writers buffer formatted bytes in memory and hand them to the OS in one ``write`` per flush,
so a process killed with ``kill -9`` leaves files that end on a record boundary.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_UNSAFE = re.compile(r"[\x00-\x1f/\\:*?\"<>|]")
_MAX_NAME_BYTES = 200


class AppendFile:
    """An ``O_APPEND`` file with an in-memory buffer that :meth:`flush` writes in one go."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buffer = bytearray()
        self.size_at_open = os.fstat(self._fd).st_size

    def ends_with_newline(self) -> bool:
        """True for an empty file or one whose last byte is a newline (not cut by a crash)."""
        if self.size_at_open == 0:
            return True
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def write(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def flush(self) -> None:
        """Hand the buffer to the OS; on failure the buffer is dropped, never re-sent twice."""
        if not self._buffer or self._fd is None:
            return
        data = memoryview(bytes(self._buffer))
        self._buffer.clear()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        if self._fd is None:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = None


def safe_file_name(name: str, suffix: str) -> str:
    """A file name for a metric: ``/`` and spaces become ``_`` (DeepSpeed's rule), then any
    character a file system could misread is replaced too; over-long names are shortened."""
    base = name.replace("/", "_").replace(" ", "_")
    base = _UNSAFE.sub("_", base)
    if base in ("", ".", ".."):
        base = base.replace(".", "_") or "_"
    if len(base.encode()) > _MAX_NAME_BYTES:
        import hashlib

        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        base = base.encode()[: _MAX_NAME_BYTES - 11].decode(errors="ignore") + "-" + digest
    return base + suffix


def inside(folder: Path, name: str) -> Path:
    """``folder / name``, refusing (ValueError) any result that would land outside ``folder``."""
    target = (folder / name).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise ValueError(f"{name!r} would be written outside {str(folder)!r}")
    return target
