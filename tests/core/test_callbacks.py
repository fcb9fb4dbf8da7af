"""The typed extension points: ``trainmon.Callback``, writers' ``finalize(status)`` and
``trainmon.testing.MemoryWriter``, driven through a real Monitor."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon import Alert, Callback, MetricStats, TrainingStopped, WindowStats
from trainmon.lifecycle import run_status
from trainmon.testing import MemoryWriter

_CONFIG: dict[str, Any] = {"steps_per_print": 4, "console": {"enabled": False}}


class _Recorder(Callback):
    def __init__(self) -> None:
        self.steps: list[tuple[Any, int]] = []
        self.windows: list[WindowStats] = []
        self.alerts: list[Alert] = []

    def on_step_end(self, engine: Any, step: int) -> None:
        self.steps.append((engine, step))

    def on_window_end(self, stats: WindowStats) -> None:
        self.windows.append(stats)

    def on_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)


def test_a_callback_subclass_gets_all_three_hooks_with_the_exported_types() -> None:
    """Steps, windows (as trainmon.WindowStats of trainmon.MetricStats) and alerts (as
    trainmon.Alert) reach a Callback subclass; the memory writer saw the same values."""
    rules = [{"name": "loss-high", "metric": "train/loss", "op": ">", "threshold": 5}]
    memory = MemoryWriter()
    recorder = _Recorder()
    engine = object()
    with trainmon.Monitor({**_CONFIG, "alerts": {"rules": rules}}, writers=[memory]) as monitor:
        monitor.add_callback(recorder)
        for step in range(1, 9):
            monitor.log({"train/loss": float(step)}, step=step)
            monitor.step_end(engine, step)
    assert recorder.steps == [(engine, step) for step in range(1, 9)]
    assert [(w.first_step, w.last_step) for w in recorder.windows] == [(1, 4), (5, 8)]
    assert all(isinstance(w, WindowStats) for w in recorder.windows)
    stats = recorder.windows[1].metrics["train/loss"]
    assert isinstance(stats, MetricStats)
    assert (stats.count, stats.mean, stats.min, stats.max, stats.last) == (4, 6.5, 5, 8, 8)
    assert [(a.rule, a.state, a.step) for a in recorder.alerts] == [("loss-high", "firing", 6)]
    assert all(isinstance(a, Alert) for a in recorder.alerts)
    assert memory.values("train/loss") == [(step, float(step)) for step in range(1, 9)]
    assert memory.status == "success" and memory.closed == 1


def test_a_callback_overriding_one_hook_gets_only_that_one() -> None:
    """The defaults do nothing: a subclass with just on_window_end works without the others."""

    class Windows(Callback):
        def __init__(self) -> None:
            self.last_steps: list[int] = []

        def on_window_end(self, stats: WindowStats) -> None:
            self.last_steps.append(stats.last_step)

    windows = Windows()
    with trainmon.Monitor(_CONFIG, writers=[]) as monitor:
        monitor.add_callback(windows)
        for step in range(1, 5):
            monitor.log({"train/loss": 1.0}, step=step)
            monitor.step_end(None, step)
    assert windows.last_steps == [4]


def test_a_plain_object_with_hooks_is_still_accepted_and_one_without_is_refused() -> None:
    """Objects written before the base class existed keep working; one with none of the hooks
    is a TypeError naming it and the hooks."""

    class Duck:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def on_step_end(self, engine: Any, step: int) -> None:
            self.steps.append(step)

    duck = Duck()
    with trainmon.Monitor(_CONFIG, writers=[]) as monitor:
        monitor.add_callback(duck)  # type: ignore[arg-type]
        monitor.step_end(None, 1)
        with pytest.raises(TypeError, match="on_step_end, on_window_end, on_alert"):
            monitor.add_callback(object())  # type: ignore[arg-type]
    assert duck.steps == [1]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (None, "success"),
        (RuntimeError("boom"), "failed"),
        (KeyboardInterrupt(), "aborted"),
        (TrainingStopped("alert rule 'nan'"), "aborted"),
        (SystemExit(0), "success"),
        (SystemExit(2), "aborted"),
    ],
)
def test_the_with_block_tells_the_writers_how_the_run_ended(
    error: BaseException | None, status: str
) -> None:
    """finalize(status) reaches each writer once, before close, after every value."""
    memory = MemoryWriter()
    try:
        with trainmon.Monitor(_CONFIG, writers=[memory]) as monitor:
            monitor.log({"train/loss": math.pi}, step=1)
            if error is not None:
                raise error
    except BaseException as caught:
        assert caught is error
    assert memory.status == status and memory.closed == 1
    assert memory.flushed == memory.records and memory.history() == {1: {"train/loss": math.pi}}
    assert run_status(error) == status


def test_close_refuses_an_unknown_status() -> None:
    monitor = trainmon.Monitor(_CONFIG, writers=[])
    with pytest.raises(ValueError, match="'crashed'.*success, failed, aborted"):
        monitor.close("crashed")  # type: ignore[arg-type]
    monitor.close()


def test_memory_writer_keeps_windows_extras_and_window_means(tmp_path: Path) -> None:
    """``every="window"`` gets one record of means per window; windows and text are kept, and
    closing hands the writers the attempt's end."""
    memory = MemoryWriter("means", every="window")
    with trainmon.Monitor(_CONFIG, writers=[memory]) as monitor:
        for step in range(1, 9):
            monitor.log({"train/loss": float(step)}, step=step)
        monitor.log_text("notes", "hello", step=8)
    assert memory.values("train/loss") == [(4, 2.5), (8, 6.5)]
    assert [w.last_step for w in memory.windows] == [4, 8]
    assert [type(extra).__name__ for extra in memory.extras] == ["Text", "AttemptEnd"]
    assert repr(memory) == "<MemoryWriter memory:means>"


def test_the_engine_with_block_tells_its_monitors_writers_the_run_failed() -> None:
    """``with trainmon.initialize(...)`` passes the status on to the monitor it owns (here
    with MemoryWriter registered as a custom writer, as a user's test would)."""
    torch = pytest.importorskip("torch")
    from trainmon.writers import register_writer, unregister_writer

    built: list[MemoryWriter] = []

    def factory() -> MemoryWriter:
        built.append(MemoryWriter())
        return built[-1]

    register_writer("test-callbacks-memory", factory)
    try:
        config = {**_CONFIG, "train_batch_size": 4, "writers": [{"class": "test-callbacks-memory"}]}
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        engine, *_ = trainmon.initialize(model=model, optimizer=optimizer, config=config)
        with pytest.raises(RuntimeError, match="boom"), engine:
            raise RuntimeError("boom")
    finally:
        unregister_writer("test-callbacks-memory")
    assert [writer.status for writer in built] == ["failed"]


def test_a_custom_writer_that_is_not_a_writer_subclass_is_told_the_status_too() -> None:
    """An object with write/flush/close and finalize, named in the config's ``writers``."""
    from trainmon.writers import register_writer, unregister_writer

    class Duck:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def write(self, records: Any) -> None:
            pass

        def flush(self) -> None:
            pass

        def finalize(self, status: str) -> None:
            self.calls.append(status)

        def close(self) -> None:
            self.calls.append("close")

    ducks: list[Duck] = []
    register_writer("test-callbacks-duck", lambda: ducks.append(Duck()) or ducks[-1])
    try:
        config = {**_CONFIG, "writers": [{"class": "test-callbacks-duck"}]}
        with pytest.raises(KeyboardInterrupt), trainmon.Monitor(config):
            raise KeyboardInterrupt
    finally:
        unregister_writer("test-callbacks-duck")
    assert [duck.calls for duck in ducks] == [["aborted", "close"]]
