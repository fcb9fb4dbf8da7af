"""Calls whose values are all tensors keep their copies in the capture store: every value comes
back at its own step and name, in order, across folds, dtypes, dropped calls and other calls in
between; and what waits in the queue is a handful of objects the garbage collector tracks, not
a tuple and a tensor per call (those set off full collections of the process)."""

from __future__ import annotations

import gc
import threading
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon
from trainmon.core.capture_store import FOLD_AT, CaptureStore


def _config(folder: Path, **trainmon_settings: Any) -> dict[str, Any]:
    section = {"enabled": True, "output_path": str(folder), "job_name": "run"}
    config: dict[str, Any] = {"jsonl": section, "console": {"enabled": False}}
    config["steps_per_print"] = 2
    if trainmon_settings:
        config["trainmon"] = trainmon_settings
    return config


def _journal(folder: Path) -> dict[int, dict[str, Any]]:
    """Every step's values, from the journal's own reader."""
    out: dict[int, dict[str, Any]] = {}
    for record in trainmon.read_journal(folder / "run"):
        if record["kind"] == "scalars":
            out.setdefault(record["step"], {}).update(record["values"])
    return out


def test_every_value_comes_back_at_its_step_across_folds_dtypes_and_other_calls(
    tmp_path: Path,
) -> None:
    """Pairs and triples of tensors of three dtypes and three sizes, floats in between,
    tensors changed in place after each call: every value is the one of its call."""
    steps = 5 * FOLD_AT + 7  # several folds per stream, and loose copies at the end
    expected: dict[int, dict[str, Any]] = {}
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(1, steps + 1):
            monitor.step = step
            floats = [torch.tensor(step + i / 100) for i in range(16)]
            ints = [torch.tensor(step * 10 + i, dtype=torch.int64) for i in range(3)]
            flag = torch.tensor(step % 2 == 0)
            monitor.write_events(list(zip([f"f/{i}" for i in range(16)], floats, strict=True)))
            monitor.write_events([(f"i/{i}", t, step) for i, t in enumerate(ints)])
            monitor.write_events([("b", flag)])
            monitor.write_events([("plain", step * 0.5)])
            for t in (*floats, *ints):
                t.add_(1000)  # in place, after the call: not what was logged
            row = {f"f/{i}": torch.tensor(step + i / 100).item() for i in range(16)}
            row.update({f"i/{i}": step * 10 + i for i in range(3)})
            row.update({"b": int(step % 2 == 0), "plain": step * 0.5})
            expected[step] = row
    assert _journal(tmp_path) == expected


def test_dropped_calls_do_not_shift_the_values_of_later_calls(tmp_path: Path) -> None:
    """A queue that drops (tiny, when_full: drop) never leaves a copy behind: each step that
    was written has its own values."""
    config = _config(tmp_path, queue_size=256, when_full="drop")
    with trainmon.Monitor(config) as monitor:
        names = [f"m/{i}" for i in range(16)]
        for step in range(1, 3001):
            monitor.step = step
            values = [torch.tensor(float(step * 100 + i)) for i in range(16)]
            monitor.write_events(list(zip(names, values, strict=True)))
        dropped = monitor.dropped_events
    journal = _journal(tmp_path)
    assert dropped > 0, "the queue never filled: the test did not test dropping"
    written = [step for step, row in journal.items() if "m/0" in row]
    assert written
    for step in written:
        row = {name: value for name, value in journal[step].items() if name.startswith("m/")}
        assert row == {f"m/{i}": float(step * 100 + i) for i in range(16)}


class _Blocking:
    """A window callback that holds the pipeline thread until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_window_end(self, window: Any) -> None:
        self.entered.set()
        self.release.wait(30)


def test_queued_tensor_calls_hold_few_tracked_objects(tmp_path: Path) -> None:
    """With the background thread held, 1,280 queued calls of 16 tensors add about one tracked
    object per FOLD_AT calls (the blocks), where a tuple and a tensor per call (plus the
    caller's 16 tuples) would add tens of thousands."""
    blocker = _Blocking()
    calls = 40 * FOLD_AT
    names = [f"m/{i}" for i in range(16)]
    tensors = [torch.tensor(float(i)) for i in range(16)]
    with trainmon.Monitor(_config(tmp_path, queue_size=10**6)) as monitor:
        monitor.add_callback(blocker)
        for step in (1, 2):  # a window closes: the pipeline thread blocks in the callback
            monitor.step = step
            monitor.write_events(list(zip(names, tensors, strict=True)))
        assert blocker.entered.wait(10)
        gc.collect()
        gc.collect()  # a tuple of untracked items is untracked on the collection after them
        before = len(gc.get_objects())
        for step in range(3, 3 + calls):
            monitor.step = step
            monitor.write_events(list(zip(names, tensors, strict=True)))
        gc.collect()
        gc.collect()
        grown = len(gc.get_objects()) - before
        blocker.release.set()
    assert grown < calls // FOLD_AT * 3 + 100, grown
    journal = _journal(tmp_path)
    assert len([s for s in journal if s >= 3]) == calls


def test_the_store_hands_values_out_in_call_order_across_threads() -> None:
    """A caller thread putting copies (and their entries) while another takes them: all
    values, in the entries' order."""
    store = CaptureStore()
    total = 50 * FOLD_AT
    queue: deque[Any] = deque()

    def produce() -> None:
        for call in range(total):
            store.put(torch.tensor([float(call * 2), float(call * 2 + 1)]), queue, (call,))

    producer = threading.Thread(target=produce)
    producer.start()
    taken: list[float] = []
    while len(taken) < total * 2:
        while queue:
            call, key = queue.popleft()
            values = store.take(key, 2)
            assert values == [float(call * 2), float(call * 2 + 1)]
            taken.extend(values)
    producer.join()
    assert taken == [float(i) for i in range(total * 2)]
    with pytest.raises(LookupError):
        store.take(key, 1)


def test_calls_from_two_threads_keep_their_own_values(tmp_path: Path) -> None:
    """Two threads logging tensors of the same dtype at once: every value stays with its own
    name and step (the store and the queue take a call's copy and entry in one step)."""
    steps = 20 * FOLD_AT

    def log(monitor: trainmon.Monitor, name: str, offset: int) -> None:
        for step in range(1, steps + 1):
            monitor.write_events([(name, torch.tensor(float(step * 10 + offset)), step)])

    with trainmon.Monitor(_config(tmp_path)) as monitor:
        threads = [
            threading.Thread(target=log, args=(monitor, name, offset))
            for name, offset in (("a", 0), ("b", 1))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    journal = _journal(tmp_path)
    for step in range(1, steps + 1):
        assert journal[step]["a"] == step * 10.0 and journal[step]["b"] == step * 10.0 + 1


def test_tensor_calls_with_steps_of_their_own_keep_each_items_step(tmp_path: Path) -> None:
    """Pairs and triples mixed in one call, and triples of different steps, are not taken for
    one step's values: each value lands at its own item's step."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.step = 3
        monitor.write_events([("a", torch.tensor(1.0)), ("b", torch.tensor(2.0), 5)])
        monitor.write_events([("c", torch.tensor(3.0), 7), ("d", torch.tensor(4.0), 8)])
        monitor.write_events([("e", torch.tensor(5.0), 9), ("f", torch.tensor(6.0), 9)])
    journal = _journal(tmp_path)
    assert journal[3]["a"] == 1.0 and journal[5]["b"] == 2.0
    assert journal[7]["c"] == 3.0 and journal[8]["d"] == 4.0
    assert journal[9] == {"e": 5.0, "f": 6.0}
