"""One step's values reach the writers as numbers whatever mix a call brings: plain numbers,
trainmon's own tensors (read in one batch), :class:`Deferred` values, bools; a name given
twice in a step keeps its last readable value, also when the last one cannot be read."""

from __future__ import annotations

import torch

import trainmon
from trainmon.core.events import Number
from trainmon.core.values import Deferred
from trainmon.testing import MemoryWriter


class Fixed(Deferred):
    """Resolves to ``value`` (None: nothing to record)."""

    def __init__(self, value: float | None) -> None:
        self.value = value

    def resolve(self) -> Number | None:
        return self.value


def _steps(calls: list[tuple[int, tuple[tuple[str, object], ...]]]) -> dict[int, dict[str, Number]]:
    """What a writer gets for each step when ``calls`` are queued before one drain."""
    recorder = MemoryWriter()
    config = {"console": {"enabled": False}, "trainmon": {"drain_interval_s": 30.0}}
    with trainmon.Monitor(config, writers=[recorder]) as monitor:
        for step, items in calls:
            monitor.step = step
            monitor.emit_checked(items)  # type: ignore[arg-type]
    out: dict[int, dict[str, Number]] = {}
    for record in recorder.records:
        if not any(name.startswith("trainmon/") for name in record.values):
            out.setdefault(record.step, {}).update(record.values)
    return out


def test_a_call_of_every_kind_becomes_numbers_in_order() -> None:
    loss = torch.tensor(0.25)
    norm = torch.tensor(1.5, dtype=torch.float64)
    items = (("loss", loss), ("lr", 1e-3), ("norm", norm), ("rss", Fixed(512.0)), ("ok", True))
    steps = _steps([(1, items), (2, items)])
    assert steps[1] == {"loss": 0.25, "lr": 1e-3, "norm": 1.5, "rss": 512.0, "ok": 1}
    assert list(steps[2]) == ["loss", "lr", "norm", "rss", "ok"]
    assert all(type(v) in (float, int) for v in steps[2].values())


def test_a_value_that_cannot_be_read_is_left_out_and_the_rest_kept() -> None:
    steps = _steps([(1, (("a", 1.0), ("gone", Fixed(None)), ("t", torch.tensor(2.0))))])
    assert steps[1] == {"a": 1.0, "t": 2.0}


def test_a_name_twice_in_one_step_keeps_the_last_readable_value() -> None:
    steps = _steps(
        [
            (1, (("x", torch.tensor(2.0)), ("y", Fixed(5.0)))),
            (1, (("x", Fixed(None)), ("y", 7.0))),  # x cannot be read: the tensor's 2.0 stays
            (2, (("x", torch.tensor(1.0)), ("x", 3.0))),  # twice in one call: the last
            (3, (("x", Fixed(4.0)),)),
            (3, (("x", torch.tensor(6.0)),)),
            (3, (("x", Fixed(None)),)),  # the tensor before it
            (4, (("x", Fixed(8.0)),)),
            (4, (("x", Fixed(None)),)),  # the deferred value before it
        ]
    )
    assert steps == {1: {"x": 2.0, "y": 7.0}, 2: {"x": 3.0}, 3: {"x": 6.0}, 4: {"x": 8.0}}


def test_a_batch_of_one_dtype_is_read_in_order() -> None:
    steps = _steps(
        [(s, (("loss", torch.tensor(s / 4)), ("norm", torch.tensor(float(s))))) for s in (1, 2, 3)]
    )
    assert steps == {s: {"loss": s / 4, "norm": float(s)} for s in (1, 2, 3)}


def test_tensors_of_mixed_dtypes_and_shapes_keep_their_kinds() -> None:
    items = (
        ("f32", torch.tensor(0.5)),
        ("f64", torch.tensor(0.25, dtype=torch.float64)),
        ("count", torch.tensor(7)),  # an int tensor stays an int, not promoted to a float
        ("flag", torch.tensor(True)),
        ("row", torch.tensor([1.5])),  # shape (1,) beside 0-d tensors
    )
    steps = _steps([(1, items), (2, items[2:])])
    assert steps == {
        1: {"f32": 0.5, "f64": 0.25, "count": 7, "flag": 1, "row": 1.5},
        2: {"count": 7, "flag": 1, "row": 1.5},
    }
    assert [type(v) for v in steps[1].values()] == [float, float, int, int, float]


def test_one_dtype_in_two_shapes_and_bools_alone_are_read_too() -> None:
    shapes = _steps([(1, (("a", torch.tensor(0.5)), ("b", torch.tensor([2.0]))))])
    assert shapes == {1: {"a": 0.5, "b": 2.0}}  # one stack of both refuses: read by shape
    bools = _steps([(1, (("ok", torch.tensor(True)), ("bad", torch.tensor(False))))])
    assert bools == {1: {"ok": 1, "bad": 0}}
    assert [type(v) for v in bools[1].values()] == [int, int]
