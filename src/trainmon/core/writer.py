"""The writer contract, the null writer, and the fan-out that isolates a failing writer.

A writer only formats and persists what it is given. It runs on the background thread, so it
may block on I/O, but it must never raise into training: :class:`WriterGroup` catches, reports
once with the traceback, counts, and carries on with the other writers.
"""

from __future__ import annotations

import abc
import errno
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, StepScalars
from trainmon.logging import get_logger

_log = get_logger("writers")

#: How a run ended, as :meth:`Writer.finalize` is told: ``"success"``, ``"failed"`` (an
#: exception left the ``with Monitor(...)`` block, or the process died of one) or
#: ``"aborted"`` (KeyboardInterrupt, SIGTERM, a stop rule's TrainingStopped).
RunStatus = Literal["success", "failed", "aborted"]
RUN_STATUSES: tuple[RunStatus, ...] = ("success", "failed", "aborted")


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

    def caught_up(self) -> None:  # noqa: B027 - optional hook
        """The writer's lane has handed it everything queued so far (the end of a drain's
        batch), on the writer's own thread: a file writer whose writes are cheap may make them
        visible now, bounding what a ``kill -9`` loses by the drain interval. Ignored by
        default (service writers push at :meth:`flush`)."""

    def finalize(self, status: RunStatus) -> None:  # noqa: B027 - optional hook
        """How the run ended, called once just before :meth:`close` (on the writer's own
        thread); a service writer records it (MLflow's run status, W&B's exit code). Ignored
        by default."""

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

    def write_windows(self, windows: Sequence[WindowStats]) -> None:  # noqa: B027 - optional hook
        """Receive completed windows (count/mean/min/max/last per metric); ignored by default."""

    @property
    def dropped_events(self) -> int:
        """Values this writer accepted and then gave up (a full disk past its bounded buffer);
        added to ``trainmon/dropped_events``. Writers that never give up keep 0."""
        return 0

    def write_extras(self, records: Sequence[Extra]) -> None:  # noqa: B027 - optional hook
        """Receive histograms, text and hyper-parameters (:mod:`trainmon.core.events`), in stream
        order; a backend that cannot show a kind ignores it (the default ignores all)."""

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

    def __init__(self, writers: Sequence[Writer] = (), label: str | None = None) -> None:
        self.writers = list(writers)
        self.error_count = 0
        self.given_up = 0  # values of batches a writer raised on (other than out of space)
        self.label = label  # the writer's name in warnings (one writer per group in lanes)
        self._reported: set[int] = set()

    def write(self, records: Sequence[StepScalars]) -> None:
        """Per-step records, to the writers that take every step; a batch a writer raises on
        without counting what it lost itself (and not out of space, which the writers buffer
        and retry) is counted as given up."""
        for writer in self.writers:
            if writer.every == "step":
                before = _dropped_by(writer)
                try:
                    writer.write(records)
                except Exception as error:
                    no_space = isinstance(error, OSError) and error.errno in _NO_SPACE
                    if not no_space and _dropped_by(writer) == before:  # it counted nothing
                        self.given_up += sum(len(record.values) for record in records)
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

    def write_extras(self, records: Sequence[Extra]) -> None:
        """Histograms, text and hyper-parameters to every writer (whatever its ``every``)."""
        for writer in self.writers:
            try:
                writer.write_extras(records)
            except Exception:
                self._failed(writer, "write_extras")

    def flush(self) -> None:
        for writer in self.writers:
            try:
                writer.flush()
            except Exception:
                self._failed(writer, "flush")

    def caught_up(self) -> None:
        """Each writer's :meth:`Writer.caught_up` (the end of a drain's batch)."""
        for writer in self.writers:
            try:
                writer.caught_up()
            except Exception:
                self._failed(writer, "caught_up")

    def close(self, status: RunStatus = "success") -> None:
        """Tell each writer how the run ended (:meth:`Writer.finalize`), then close it."""
        for writer in self.writers:
            try:
                writer.finalize(status)
            except Exception:
                self._failed(writer, "finalize")
            try:
                writer.close()
            except Exception:
                self._failed(writer, "close")

    def resume(self, step: int, identities: Sequence[Mapping[str, Any] | None]) -> None:
        """Each writer's :meth:`Writer.resume` with its saved identity (same order as
        :attr:`writers`), in stream order: a writer that fails is reported and starts anew."""
        for writer, identity in zip(self.writers, identities, strict=True):
            try:
                writer.resume(step, identity)
            except Exception:
                self._failed(writer, f"resume (at step {step}; it carries on as a new run)")

    @property
    def dropped_events(self) -> int:
        """What the writers gave up after accepting it (see :attr:`Writer.dropped_events`)."""
        return self.given_up + sum(_dropped_by(writer) for writer in self.writers)

    def _failed(self, writer: Writer, operation: str) -> None:
        self.error_count += 1
        if id(writer) in self._reported:
            return
        self._reported.add(id(writer))
        error = sys.exc_info()[1]
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            consequence = (
                "out of space: its files are cut back to the last whole record and writing is "
                "retried, holding what it can in a bounded buffer (what does not fit is counted "
                "in trainmon/dropped_events)"
            )
        else:
            consequence = "its data is being lost"
        _log.warning(
            "%s failed in %s; %s, the other writers and training carry on "
            "(further errors of this writer are counted in trainmon/writer_errors, not printed)",
            self.label or f"{writer.kind} writer ({writer.location})",
            operation,
            consequence,
            exc_info=True,
        )


_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _dropped_by(writer: Writer) -> int:
    try:
        return int(writer.dropped_events)
    except Exception:  # a user's writer with a broken property: count nothing
        return 0
