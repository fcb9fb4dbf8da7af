"""What watches the pipeline's stream on its background thread: alert rules, user callbacks,
the live goodput meter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, Number, StepScalars


class Observer:
    """Watches the stream on the background thread (alert rules, user callbacks, live goodput).

    :meth:`on_records` and :meth:`on_window` may return extra records (for example
    ``alerts/<name>``) that are written to every writer after what was observed;
    :meth:`enrich` adds metrics to the window itself. An observer that raises is reported and
    skipped.
    """

    def on_records(self, records: Sequence[StepScalars]) -> Sequence[StepScalars]:
        """Per-step records, in step order, before the writers get them."""
        return ()

    def on_window(self, window: WindowStats) -> Sequence[StepScalars]:
        """A completed window, with cross-rank metrics when there are any."""
        return ()

    def enrich(self, window: WindowStats) -> Mapping[str, Number] | None:
        """Metrics to add to a completed window before anyone sees it (writers, console line,
        alert rules), written at its last step: what is known only at a window's end."""
        return None

    def on_extra(self, record: Extra) -> None:
        """A histogram, text, hyper-parameters, span or end record, after the writers got it."""

    def close(self) -> None:
        """The pipeline is closing: release resources."""
