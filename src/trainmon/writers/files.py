"""Append-only files written in whole chunks, and output paths that cannot escape their folder.

Writers buffer formatted bytes in memory and hand them to the OS in one ``write`` per flush,
so a process killed with ``kill -9`` leaves files that end on a record boundary.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

_UNSAFE = re.compile(r"[\x00-\x1f/\\:*?\"<>|]")
_MAX_NAME_BYTES = 200


FLUSH_AT_BYTES = 1 << 20
"""Buffered bytes past which a file writer flushes at once instead of waiting for the
pipeline's periodic flush: bounds memory and loss on a crash without a syscall per batch."""


def flush_due(buffered: int) -> bool:
    """Whether ``buffered`` bytes are enough to flush now (see :data:`FLUSH_AT_BYTES`)."""
    return buffered > FLUSH_AT_BYTES


PENDING_BYTES = 4 << 20
"""What a file writer keeps in memory while its disk refuses writes (full disk, quota); past
this, the held data is given up and counted (see :attr:`AppendFile.dropped`)."""


class AppendFile:
    """An ``O_APPEND`` file with an in-memory buffer that :meth:`flush` writes in one go.

    A flush that fails part-way (a full disk) cuts the file back to where that flush started,
    which is always the end of a whole record, so later writes are never glued onto a torn one.
    The buffer is then kept for the next flush while it holds at most ``max_pending`` bytes;
    beyond that (and always with ``max_pending=0``) it is given up, and the values it held
    (as told to :meth:`write`) are added to :attr:`dropped`.
    """

    def __init__(self, path: Path, max_pending: int = 0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buffer = bytearray()
        self._values = 0  # values held in the buffer, for counting what a give-up drops
        self._header = b""
        self.size_at_open = os.fstat(self._fd).st_size
        self._good_size = self.size_at_open  # end of the last whole record written
        self.max_pending = max_pending
        self.dropped = 0
        """Values given up because the file could not take them."""
        self.failures = 0
        """Flushes that failed since the last one that succeeded."""

    def ends_with_newline(self) -> bool:
        """True for an empty file or one whose last byte is a newline (not cut by a crash)."""
        if self.size_at_open == 0:
            return True
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def write(self, data: bytes, values: int = 0) -> None:
        """Buffer ``data`` (whole records holding ``values`` values) for the next flush."""
        self._buffer += data
        self._values += values

    def write_header(self, data: bytes) -> None:
        """Buffer a header that must start the file: kept even when held data is given up."""
        if self._good_size == 0:
            self._header = bytes(data)
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def flush(self) -> None:
        """Hand the buffer to the OS; on failure cut the file back and keep or give up the
        buffer (see the class docstring), then raise the error."""
        if not self._buffer or self._fd is None:
            return
        if self.failures:
            self._cut_back()  # in case cutting back after the last failure failed too
        data = memoryview(self._buffer)
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError:
            data.release()
            self._cut_back()
            self.failures += 1
            if len(self._buffer) > self.max_pending:
                self.give_up()
            raise
        data.release()
        self._good_size += done
        self._buffer.clear()
        self._values = 0
        self._header = b""
        self.failures = 0

    def _cut_back(self) -> None:
        """Remove what a failed flush left of a partial record."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # else the next flush tries again first
            os.ftruncate(self._fd, self._good_size)

    def give_up(self) -> None:
        """Drop what is buffered (keeping a header the file still needs), counting its values."""
        self.dropped += self._values
        self._values = 0
        self._buffer = bytearray(self._header if self._good_size == 0 else b"")

    def close(self) -> None:
        """Flush, then close the descriptor even when the flush fails (its data is dropped)."""
        if self._fd is None:
            return
        try:
            self.flush()
        finally:
            if self._buffer:
                self.give_up()
            os.close(self._fd)
            self._fd = None


NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def flush_or_hold(handle: AppendFile) -> None:
    """Flush ``handle``; out of space (a disk full from the start), keep what it holds for the
    next flush instead of failing, as a flush in the middle of a run does."""
    try:
        handle.flush()
    except OSError as error:
        if error.errno not in NO_SPACE:
            raise


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
