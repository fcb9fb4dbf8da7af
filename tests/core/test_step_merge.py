"""One step's calls make one record in the writers, whatever comes between them: a drain of the
background thread, an extra (a text), sampled values; the later value of a name wins."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest

import trainmon
from trainmon.core.events import Extra, Number, StepScalars, Text
from trainmon.testing import MemoryWriter

#: No drain but the ones a test runs itself (nor a flush by the interval) until the close.
QUIET = {
    "console": {"enabled": False},
    "trainmon": {"drain_interval_s": 30.0, "flush_interval_s": 30.0},
}


@pytest.fixture
def monitor_and_writer() -> Iterator[tuple[trainmon.Monitor, MemoryWriter]]:
    """A Monitor whose background thread drains only when a test says so (or at the close)."""
    writer = MemoryWriter()
    monitor = trainmon.Monitor(QUIET, writers=[writer])
    monitor._pipeline._hold_s = 60.0  # the calls' spacing never decides in these tests
    try:
        yield monitor, writer
    finally:
        monitor.close()


def wait_for(writer: MemoryWriter, name: str, count: int) -> list[tuple[int, Number]]:
    """``name``'s values once the writer holds ``count`` (its lane writes a little later)."""
    deadline = time.monotonic() + 5.0
    while len(writer.values(name)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return writer.values(name)


def test_a_drain_between_two_calls_of_a_step_keeps_one_value_the_last(
    monitor_and_writer: tuple[trainmon.Monitor, MemoryWriter],
) -> None:
    """An engine's train/loss, a drain, then the user's train/loss at the same step: the writer
    gets the step once, with the user's value and the engine's other metrics."""
    monitor, writer = monitor_and_writer
    for step in (1, 2):
        monitor.step = step
        monitor.emit_checked((("train/loss", 1.0 * step), ("perf/step_time_ms", 3.0)))
        monitor._pipeline._drain()  # the background's drain, come between the two calls
        monitor.write_events([("train/loss", 10.0 * step)])
    monitor.close()
    assert writer.values("train/loss") == [(1, 10.0), (2, 20.0)]
    assert writer.values("perf/step_time_ms") == [(1, 3.0), (2, 3.0)]
    assert [record.step for record in writer.records if "train/loss" in record.values] == [1, 2]


def test_a_held_step_is_written_at_the_next_drain_without_a_later_step(
    monitor_and_writer: tuple[trainmon.Monitor, MemoryWriter],
) -> None:
    """The newest step waits one drain at most: a loop that stops logging still gets it written
    without a flush."""
    monitor, writer = monitor_and_writer
    monitor.step = 7
    monitor.write_events([("train/loss", 1.5)])
    monitor._pipeline._drain()
    time.sleep(0.2)
    assert writer.values("train/loss") == []  # held: a call of step 7 may still come
    monitor._pipeline._drain()
    assert wait_for(writer, "train/loss", 1) == [(7, 1.5)]


def test_an_extra_or_sampled_values_between_two_calls_of_a_step_split_nothing(
    monitor_and_writer: tuple[trainmon.Monitor, MemoryWriter],
) -> None:
    """A text and sampled system values queued between the engine's and the user's calls of a
    step leave the step one record, the user's value kept, the sampled values at that step."""
    monitor, writer = monitor_and_writer
    monitor.step = 3
    monitor.emit_checked((("train/loss", 1.0),))
    monitor.log_text("notes/sample", "hello")
    monitor._pipeline.put_sampled([("sys/process_cpu_percent", 50.0)])
    monitor.write_events([("train/loss", 2.0)])
    monitor.flush()
    assert writer.values("train/loss") == [(3, 2.0)]
    assert writer.values("sys/process_cpu_percent") == [(3, 50.0)]
    assert [getattr(extra, "step", None) for extra in writer.extras] == [3]


class OrderWriter(MemoryWriter):
    """Keeps the steps of the scalars and texts it is given, in the order given."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[str, int]] = []

    def write(self, records: Sequence[StepScalars]) -> None:
        super().write(records)
        self.steps.extend(("scalars", record.step) for record in records if record.step > 0)

    def write_extras(self, records: Sequence[Extra]) -> None:
        super().write_extras(records)
        self.steps.extend(("text", record.step) for record in records if isinstance(record, Text))


def test_a_text_at_a_later_step_comes_after_the_open_step() -> None:
    """A text logged for the next step while the current step is still open is written after
    that step's values, so no writer sees a step go back (W&B drops such records)."""
    writer = OrderWriter()
    with trainmon.Monitor(QUIET, writers=[writer]) as monitor:
        monitor.step = 3
        monitor.write_events([("train/loss", 1.0)])
        monitor.log_text("notes/next", "for step 4", step=4)
        monitor.step = 4
        monitor.write_events([("train/loss", 2.0)])
    assert writer.steps == [("scalars", 3), ("text", 4), ("scalars", 4)]
