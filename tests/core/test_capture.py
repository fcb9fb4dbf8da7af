"""A value is what it was when it was logged; bad input is refused at the call and never
reaches the background; events that nothing can write any more are counted and reported."""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import trainmon
from conftest import host_read_spy
from trainmon.core.place import ProcessPlace


def _config(folder: Path) -> dict[str, Any]:
    """JSONL only (the journal is read back with read_journal), console off."""
    section = {"enabled": True, "output_path": str(folder), "job_name": "run"}
    return {"jsonl": section, "console": {"enabled": False}, "steps_per_print": 2}


def _journal(folder: Path) -> dict[str, list[tuple[int, Any]]]:
    """Every (step, value) per metric, from the journal's own reader."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for record in trainmon.read_journal(folder / "run"):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                out.setdefault(name, []).append((record["step"], value))
    return out


# ---- values are captured at the call ---------------------------------------------------------


def test_a_list_row_changed_after_the_call_keeps_its_logged_value(tmp_path: Path) -> None:
    """write_events([row]) with a list row that the caller then mutates records the row as it
    was at the call, for pairs and triples alike."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.write_events([("warm", 0.0)])  # names known: the fast path is tried first
        pair = ["train/loss", 1.5]
        triple = ["train/acc", 0.25, 7]
        monitor.step = 3
        monitor.write_events([pair, triple])
        pair[1] = 99.0
        triple[1], triple[2] = 42.0, 1000
        pair[0] = "renamed"
    journal = _journal(tmp_path)
    assert journal["train/loss"] == [(3, 1.5)]
    assert journal["train/acc"] == [(7, 0.25)]
    assert "renamed" not in journal


def test_a_tensor_changed_in_place_after_the_call_keeps_its_logged_value(tmp_path: Path) -> None:
    """acc.zero_() and Hugging Face's ``tr_loss -= tr_loss`` right after logging do not change
    what was logged; neither does a later in-place step on a parameter being logged."""
    acc = torch.tensor(0.0)
    tr_loss = torch.tensor(0.0)
    weight = torch.nn.Parameter(torch.tensor([2.0]))
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(20):
            acc += step
            tr_loss += 0.5 * step
            monitor.step = step
            monitor.write_events([("eval/acc", acc), ("train/loss", tr_loss), ("w", weight)])
            acc.zero_()
            tr_loss -= tr_loss
            with torch.no_grad():
                weight.mul_(-1.0)
            monitor.log({"logged": acc + 1})  # a fresh tensor, for contrast
    journal = _journal(tmp_path)
    assert journal["eval/acc"] == [(s, float(s)) for s in range(20)]
    assert journal["train/loss"] == [(s, 0.5 * s) for s in range(20)]
    assert journal["w"] == [(s, 2.0 if s % 2 == 0 else -2.0) for s in range(20)]
    assert journal["logged"] == [(s, 1.0) for s in range(20)]


def test_mixed_tensors_in_one_call_are_each_captured_exactly(tmp_path: Path) -> None:
    """Shapes () and (1,), float32, float64, bfloat16, int64 (beyond 2**53), bool and a
    requires-grad loss in one call are captured exactly, whatever happens to them later."""
    loss = (torch.tensor([3.0], requires_grad=True) * 2).sum()
    values = {
        "a/f32": torch.tensor(1.25),
        "a/f32_1": torch.tensor([2.5]),
        "a/f64": torch.tensor(0.1, dtype=torch.float64),
        "a/bf16": torch.tensor(4.0, dtype=torch.bfloat16),
        "a/i64": torch.tensor(2**60 + 1),
        "a/bool": torch.tensor(True),
        "a/loss": loss,
        "a/np0d": np.array(7.5),
        "a/np1": np.array([8], dtype=np.int32),
    }
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log(values, step=1)
        for value in values.values():
            if isinstance(value, torch.Tensor) and not value.requires_grad:
                value.zero_()
            elif isinstance(value, np.ndarray):
                value[...] = 0
        loss.backward()  # the capture did not join (or break) the caller's graph
    journal = {name: points[0][1] for name, points in _journal(tmp_path).items()}
    assert journal == {
        "a/f32": 1.25,
        "a/f32_1": 2.5,
        "a/f64": 0.1,
        "a/bf16": 4.0,
        "a/i64": 2**60 + 1,
        "a/bool": 1,
        "a/loss": 6.0,
        "a/np0d": 7.5,
        "a/np1": 8,
    }
    assert type(journal["a/i64"]) is int and type(journal["a/np1"]) is int


def test_an_integer_tensor_step_is_the_step_at_the_call(tmp_path: Path) -> None:
    """A step given as an integer tensor that is incremented in place afterwards records the
    step it had at the call."""
    step = torch.tensor(10)
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for _ in range(3):
            monitor.write_events([("train/loss", torch.tensor(1.0), step)])
            step += 1
    assert _journal(tmp_path)["train/loss"] == [(10, 1.0), (11, 1.0), (12, 1.0)]


# ---- bad input is refused at the call ------------------------------------------------------

BAD_STEPS = [
    pytest.param(np.array([3, 4]), TypeError, "not one integer", id="numpy-array-of-two"),
    pytest.param(torch.tensor([3, 4]), TypeError, "not one integer", id="tensor-of-two"),
    pytest.param(
        torch.empty((), dtype=torch.long, device="meta"), TypeError, "not one integer", id="meta"
    ),
    pytest.param(torch.tensor(7.9), TypeError, "dtype torch.float32", id="float-tensor"),
    pytest.param(2**63, ValueError, "outside the 64-bit range", id="int64-max+1"),
    pytest.param(-(2**63) - 1, ValueError, "outside the 64-bit range", id="int64-min-1"),
    pytest.param(10**400, ValueError, "outside the 64-bit range", id="huge"),
]


@pytest.mark.parametrize("use_log", [False, True])
@pytest.mark.parametrize(("step", "error", "fragment"), BAD_STEPS)
def test_a_step_that_is_not_one_int64_is_refused_naming_the_metric(
    tmp_path: Path, step: Any, error: type[Exception], fragment: str, use_log: bool
) -> None:
    """A step that passes ``__index__`` but is not one integer, or is beyond int64, raises at
    the call naming the metric, and every other metric of the run is still written."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.write_events([("train/loss", 1.0, 0)])
        with pytest.raises(error) as info:
            if use_log:
                monitor.log({"train/loss": 2.0, "train/lr": 0.1}, step=step)
            else:
                monitor.write_events([("train/lr", 0.1, 1), ("train/loss", 2.0, step)])
        assert fragment in str(info.value)
        assert ("log(step=...)" if use_log else "metric 'train/loss'") in str(info.value)
        with pytest.raises(error):
            monitor.step = step
        monitor.write_events([("train/loss", 3.0, 2), ("train/lr", 0.2, 2)])
        assert monitor.flush(timeout=30) is True
    journal = _journal(tmp_path)
    assert journal == {"train/loss": [(0, 1.0), (2, 3.0)], "train/lr": [(2, 0.2)]}
    assert not any("trainmon/" in name for name in journal)


def test_int64_bounds_are_accepted_as_steps(tmp_path: Path) -> None:
    """The extreme int64 steps (and numpy or CPU tensor integers) are steps like any other."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.write_events([("a", 1.0, -(2**63)), ("a", 2.0, 2**63 - 1)])
        monitor.write_events([("b", 1.0, np.int64(5)), ("b", 2.0, torch.tensor(6))])
        monitor.log({"c": 1.0}, step=np.uint32(9))
    journal = _journal(tmp_path)
    assert journal["a"] == [(-(2**63), 1.0), (2**63 - 1, 2.0)]
    assert journal["b"] == [(5, 1.0), (6, 2.0)] and journal["c"] == [(9, 1.0)]


@pytest.mark.parametrize(
    "value", [10**400, -(10**400), 2**1024], ids=["1e400", "-1e400", "2**1024"]
)
def test_an_integer_too_big_for_a_float_is_refused_naming_the_metric(
    tmp_path: Path, value: int
) -> None:
    """``10**400`` raises at the call naming the metric; windows, window records and the
    journal carry on as if it had never been logged."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        with pytest.raises(
            ValueError, match=r"metric 'train/big': integer of \d+ digits is too large for a float"
        ):
            monitor.write_events([("train/big", value, 0)])
        for step in range(4):
            monitor.write_events([("train/big", 2**100, step), ("train/loss", 1.0, step)])
        monitor.write_events([("train/largest", 2**1024 - 2**970 - 1, 3)])  # float() takes it
    windows = [r for r in trainmon.read_journal(tmp_path / "run") if r["kind"] == "window"]
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(0, 0), (1, 2), (3, 3)]
    assert _journal(tmp_path)["train/big"] == [(s, 2**100) for s in range(4)]
    ((step, largest),) = _journal(tmp_path)["train/largest"]
    assert step == 3 and float(largest) == float(2**1024 - 2**970 - 1)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: torch.empty((), device="meta"), "meta tensor"),
        (lambda: torch.tensor([1.5]).to_sparse(), "layout torch.sparse_coo"),
        (lambda: torch.tensor([[1.5]]).to_sparse_csr(), "layout torch.sparse_csr"),
        (
            lambda: torch.quantize_per_tensor(torch.tensor([1.5]), 0.1, 0, torch.qint8),
            "quantized tensor",
        ),
    ],
    ids=["meta", "sparse-coo", "sparse-csr", "quantized"],
)
def test_unreadable_single_element_tensors_are_refused_naming_the_metric(
    tmp_path: Path, make: Any, fragment: str
) -> None:
    """Meta, sparse and quantized single-element tensors raise at the call (they used to be
    logged as NaN, which could fire a non_finite stop)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized creation is deprecated in this torch
        value = make()
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.write_events([("train/loss", 0.5, 0), ("train/lr", 0.1, 0)])  # names known
        for call in (
            lambda: monitor.write_events([("train/loss", value)]),
            lambda: monitor.write_events([("train/lr", torch.tensor(0.1)), ("train/loss", value)]),
        ):
            with pytest.raises((TypeError, ValueError)) as info:
                call()
            assert "metric 'train/loss'" in str(info.value) and fragment in str(info.value)
        monitor.write_events([("train/loss", torch.tensor(2.0), 1)])
    assert _journal(tmp_path) == {"train/loss": [(0, 0.5), (1, 2.0)], "train/lr": [(0, 0.1)]}


# ---- events nothing can write: after close(), in a forked child -----------------------------


def test_logging_after_close_warns_once_and_is_counted(
    tmp_path: Path, trainmon_logs: list[Any]
) -> None:
    """write_events, log and trainmon's own producers after close() drop their events with one
    warning naming the monitor and the reason, and Monitor.dropped_events counts every one."""
    monitor = trainmon.Monitor(_config(tmp_path))
    monitor.write_events([("train/loss", 1.0, 0)])
    monitor.close()
    monitor.write_events([("train/loss", 2.0, 1), ("train/lr", 0.1, 1)])
    monitor.log({"train/loss": 3.0}, step=2)
    monitor.write_events(iter([("train/loss", torch.tensor(4.0))]))
    with monitor.timer("data"):
        pass
    assert monitor.dropped_events == 5
    warnings_ = [r.getMessage() for r in trainmon_logs if r.levelname == "WARNING"]
    assert len(warnings_) == 1
    assert repr(monitor) in warnings_[0] and "close()" in warnings_[0]
    assert _journal(tmp_path) == {"train/loss": [(0, 1.0)]}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_logging_in_a_forked_child_warns_once_and_is_counted(
    tmp_path: Path, trainmon_logs: list[Any]
) -> None:
    """In a child forked from the process that built the monitor, logging drops its events with
    one warning naming the monitor and the fork, counts them, and the parent is unaffected."""
    monitor = trainmon.Monitor(_config(tmp_path), place=ProcessPlace(0, 1))
    monitor.write_events([("train/loss", 1.0, 0)])
    assert monitor.flush(timeout=30)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            before = len(trainmon_logs)
            monitor.write_events([("train/loss", 5.0, 1)])
            monitor.log({"train/loss": 6.0, "train/lr": 0.5}, step=2)
            said = [r.getMessage() for r in trainmon_logs[before:] if r.levelname == "WARNING"]
            result = {"dropped": monitor.dropped_events, "warnings": said, "pid": os.getpid()}
            os.write(write, json.dumps(result).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = json.loads(pipe.read().decode())
    assert os.waitpid(pid, 0)[1] == 0
    assert child["dropped"] == 3
    assert len(child["warnings"]) == 1
    message = child["warnings"][0]
    assert repr(monitor) in message and "fork" in message and str(child["pid"]) in message
    monitor.write_events([("train/loss", 2.0, 3)])
    monitor.close()
    assert monitor.dropped_events == 0
    assert _journal(tmp_path)["train/loss"] == [(0, 1.0), (3, 2.0)]


def test_a_nan_from_capture_is_only_a_real_nan(tmp_path: Path) -> None:
    """Non-finite tensor values are captured as they are (NaN and ±Inf stay distinct)."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log({"x": torch.tensor(math.nan), "y": torch.tensor(-math.inf)}, step=0)
    journal = _journal(tmp_path)
    assert math.isnan(journal["x"][0][1]) and journal["y"] == [(0, -math.inf)]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_capture_reads_no_value_on_the_calling_thread(tmp_path: Path) -> None:
    """Capturing tensors of mixed shapes and dtypes calls no .item()/.tolist()/.cpu()/.to()
    on the calling thread (the copy is read by the background thread), and the values arrive."""

    Spy, reads_on_caller = host_read_spy()

    def spy(value: Any) -> Any:
        return torch.as_tensor(value).as_subclass(Spy)

    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(30):
            values = {"a": spy(float(step)), "b": spy([2.0 * step]), "c": spy(step)}
            monitor.log(values, step=step)
            monitor.write_events([("d", spy(0.5 * step), step), ("e", spy(float(step)), step)])
    assert reads_on_caller == []
    journal = _journal(tmp_path)
    assert journal["b"][-1] == (29, 58.0) and journal["c"][-1] == (29, 29)
    assert journal["e"][-1] == (29, 29.0) and len(journal["a"]) == 30


def test_the_background_thread_waits_for_the_copy_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an accelerator the call records an event after the copy and only the background
    thread waits on it, before reading the copy (simulated: an event that records who waits)."""
    import threading

    import trainmon.core.values as values_module

    caller = threading.get_ident()
    waits: list[int] = []

    class Event:
        def synchronize(self) -> None:
            waits.append(threading.get_ident())

    monkeypatch.setattr(values_module, "_event_after", lambda torch, copy: Event())
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(10):
            monitor.write_events([("a", torch.tensor(1.0 * step), step)])
            monitor.log({"b": torch.tensor(step), "c": torch.tensor([2.0])}, step=step)
    assert len(waits) >= 20 and caller not in waits
    journal = _journal(tmp_path)
    assert journal["a"][-1] == (9, 9.0) and journal["b"][-1] == (9, 9)


# ---- the capture itself: exact values, no graph, the caller's grad mode ----------------------


def test_integers_stacked_with_floats_keep_their_exact_values(tmp_path: Path) -> None:
    """An int64 beyond float64's 2**53 and an int32 beyond float32's 2**24, logged in one call
    with float32 tensors through the fast path (names known), arrive exactly and as ints: no
    stack promotes them to a float."""
    big, odd = 2**60 + 1, 2**24 + 1
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.write_events([("f", 0.0, 0), ("i64", 0, 0), ("i32", 0, 0), ("g", 0.0, 0)])
        monitor.step = 1
        monitor.write_events(
            [
                ("f", torch.tensor(1.5)),
                ("i64", torch.tensor(big)),
                ("i32", torch.tensor(odd, dtype=torch.int32)),
                ("g", torch.tensor(0.25)),
            ]
        )
    journal = {name: points[-1] for name, points in _journal(tmp_path).items()}
    assert journal == {"f": (1, 1.5), "i64": (1, big), "i32": (1, odd), "g": (1, 0.25)}
    assert type(journal["i64"][1]) is int and type(journal["i32"][1]) is int


@pytest.mark.parametrize("count", [1, 16])
def test_a_captured_loss_does_not_keep_the_callers_graph_alive(count: int) -> None:
    """The copy of a tensor that requires grad holds no autograd graph: once the caller drops
    its loss, the graph's leaf is freed while the snapshot still holds the value; the caller's
    grad mode is as it was."""
    import gc
    import weakref

    from trainmon.core.values import capture

    weight = torch.tensor(2.0, requires_grad=True)
    leaf = weakref.ref(weight)
    loss = weight * 3.0
    tensors = [loss] + [torch.tensor(float(i)) for i in range(1, count)]
    snapshot = capture(tensors)
    assert torch.is_grad_enabled()
    del weight, loss, tensors
    gc.collect()
    assert leaf() is None
    assert snapshot.numbers() == [6.0] + [float(i) for i in range(1, count)]


def test_capture_restores_the_grad_mode_it_found_even_when_it_refuses() -> None:
    """Under no_grad capture leaves grad off; with grad on, a refused tensor raises and grad is
    on again afterwards."""
    from trainmon.core.values import capture

    with torch.no_grad():
        capture([torch.tensor(1.0), torch.tensor(2.0)])
        assert not torch.is_grad_enabled()
    with pytest.raises(ValueError, match=r"metric 'b': meta tensor"):
        capture([torch.tensor(1.0), torch.empty((), device="meta")], ["a", "b"])
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("count", [1, 16])
def test_a_snapshot_keeps_the_values_of_the_call(count: int) -> None:
    """Tensors of one dtype (one stack, or one clone for a single tensor) changed in place
    after the capture read back as they were at the call."""
    from trainmon.core.values import capture

    tensors = [torch.tensor(float(i) + 0.5) for i in range(count)]
    snapshot = capture(tensors)
    for tensor in tensors:
        tensor.zero_()
    assert snapshot.numbers() == [float(i) + 0.5 for i in range(count)]
