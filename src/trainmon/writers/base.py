"""The writer contract, the null writer, and the fan-out that isolates a failing writer.

A writer only formats and persists what it is given. It runs on the background thread, so it
may block on I/O, but it must never raise into training: :class:`WriterGroup` catches, reports
once with the traceback, counts, and carries on with the other writers.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from trainmon.aggregate import WindowStats
from trainmon.events import StepScalars
from trainmon.logging import get_logger

_log = get_logger("writers")


class Writer(abc.ABC):
    """Base of every backend: ``write`` a batch, ``flush`` it durably, ``close`` idempotently.

    ``every`` says what ``write`` receives: each step's values (``"step"``), or one record of
    window means per window (``"window"``). :meth:`write_windows` is an optional hook that
    gets the full window statistics whatever ``every`` is.
    """

    kind: ClassVar[str] = "writer"
    location: str = ""
    every: Literal["step", "window"] = "step"

    @abc.abstractmethod
    def write(self, records: Sequence[StepScalars]) -> None:
        """Format and buffer (or send) one batch of per-step records, in step order."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Make everything written so far visible to readers (on disk, or sent)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release resources; calling it again does nothing."""

    def write_windows(self, windows: Sequence[WindowStats]) -> None:  # noqa: B027 - optional hook
        """Receive completed windows (count/mean/min/max/last per metric); ignored by default."""

    def identity(self) -> Mapping[str, Any] | None:
        """What a run resumed from a checkpoint needs to continue this writer's run (W&B's
        and MLflow's run id), JSON-serialisable; None (the default) when there is nothing."""
        return None

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:  # noqa: B027
        """The run restarts from a checkpoint: ``step`` is the first step it will log again,
        and what was logged at ``step`` and later by the run that was cut short is orphaned;
        ``identity`` is what :meth:`identity` returned then (None when not saved). Called on
        the background thread before any record of the resumed run; a file writer marks the
        restart (TensorBoard's purge marker, the journal's ``resume`` record), a service
        writer switches back to the saved run. Does nothing by default."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"


class NullWriter(Writer):
    """Accepts everything and does nothing: what ranks that do not write get."""

    kind = "null"

    def write(self, records: Sequence[StepScalars]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class WriterGroup:
    """Fans each call out to every writer; a writer that raises is reported once and counted."""

    def __init__(self, writers: Sequence[Writer] = ()) -> None:
        self.writers = list(writers)
        self.error_count = 0
        self._reported: set[int] = set()

    def write(self, records: Sequence[StepScalars]) -> None:
        """Per-step records, to the writers that take every step."""
        for writer in self.writers:
            if writer.every == "step":
                try:
                    writer.write(records)
                except Exception:
                    self._failed(writer, "write")

    def write_kinds(self, records: Sequence[StepScalars], kinds: frozenset[str]) -> None:
        """Per-step records to the ``every: "step"`` writers whose ``kind`` is in ``kinds``."""
        for writer in self.writers:
            if writer.every == "step" and writer.kind in kinds:
                try:
                    writer.write(records)
                except Exception:
                    self._failed(writer, "write")

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        """Completed windows to every writer's hook, and as means to ``every: window`` writers."""
        means: list[StepScalars] | None = None
        for writer in self.writers:
            try:
                writer.write_windows(windows)
                if writer.every == "window":
                    if means is None:
                        means = [window.means() for window in windows]
                    writer.write(means)
            except Exception:
                self._failed(writer, "write_windows")

    def flush(self) -> None:
        for writer in self.writers:
            try:
                writer.flush()
            except Exception:
                self._failed(writer, "flush")

    def close(self) -> None:
        for writer in self.writers:
            try:
                writer.close()
            except Exception:
                self._failed(writer, "close")

    def _failed(self, writer: Writer, operation: str) -> None:
        self.error_count += 1
        if id(writer) in self._reported:
            return
        self._reported.add(id(writer))
        _log.warning(
            "%s writer (%s) failed in %s; its data is being lost, the other writers and "
            "training carry on (further errors of this writer are counted in "
            "trainmon/writer_errors, not printed)",
            writer.kind,
            writer.location,
            operation,
            exc_info=True,
        )
