"""Deferred values of a batch of steps are resolved class by class, in one call each, and land
at their own steps; a class whose batch call fails falls back to its values one by one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

import pytest
import torch

import trainmon
from trainmon.collect.instrument import grad_norm
from trainmon.core.events import Number
from trainmon.core.values import Deferred
from trainmon.testing import MemoryWriter


class Tracked(Deferred):
    """Counts how it was resolved; ``resolve_all`` raises when asked to (then ``bad`` raises)."""

    batch_calls: ClassVar[list[int]] = []
    fail_batches = False

    def __init__(self, value: float, bad: bool = False) -> None:
        self.value = value
        self.bad = bad

    def resolve(self) -> Number | None:
        if self.bad:
            raise ValueError("cannot read this one")
        return self.value

    @classmethod
    def resolve_all(cls, values: Sequence[Deferred]) -> list[Number | None]:
        cls.batch_calls.append(len(values))
        if cls.fail_batches:
            raise RuntimeError("the batch call failed")
        return super().resolve_all(values)


@pytest.fixture(autouse=True)
def _reset() -> None:
    Tracked.batch_calls = []
    Tracked.fail_batches = False


def _run(values: Sequence[Deferred]) -> list[tuple[int, float | None]]:
    recorder = MemoryWriter()
    config = {"console": {"enabled": False}, "trainmon": {"drain_interval_s": 30.0}}
    with trainmon.Monitor(config, writers=[recorder]) as monitor:
        for step, value in enumerate(values, start=1):
            monitor.step = step
            monitor.emit_checked((("x", value),))
    return [(r.step, r.values.get("x")) for r in recorder.records if "x" in r.values]


def test_a_batch_of_steps_is_resolved_in_one_call_per_class() -> None:
    """20 steps queued before the background drains: one ``resolve_all`` of 20 values, and
    each value at its own step."""
    got = _run([Tracked(float(i)) for i in range(1, 21)])
    assert got == [(i, float(i)) for i in range(1, 21)]
    assert Tracked.batch_calls == [20]


def test_a_failing_batch_call_falls_back_to_each_value(caplog: pytest.LogCaptureFixture) -> None:
    """The batch call raises: every value is resolved alone, the unreadable one is skipped and
    reported by name, the others are kept at their steps."""
    Tracked.fail_batches = True
    values = [Tracked(1.0), Tracked(2.0, bad=True), Tracked(3.0)]
    with caplog.at_level(logging.WARNING, logger="trainmon"):
        got = _run(values)
    assert got == [(1, 1.0), (3, 3.0)]
    assert "could not resolve the value of 'x'" in caplog.text


def test_norms_of_many_steps_resolve_together_as_each_alone() -> None:
    """The per-step gradient norms of a batch, resolved in one stack, equal each step's own
    norm and torch's total norm; a NaN gradient spoils only its own step; steps with another
    number of gradients fall back to one by one."""
    torch.manual_seed(0)
    steps = [[torch.randn(7, 5), torch.randn(5)] for _ in range(6)]
    steps[3][0][2, 2] = float("nan")
    norms = [grad_norm(grads, True) for grads in steps]
    together = type(norms[0]).resolve_all(norms)
    alone = [norm.resolve() for norm in norms]
    total = [float(torch.nn.utils.get_total_norm(grads)) for grads in steps]
    for step, (a, b, c) in enumerate(zip(together, alone, total, strict=True)):
        if step == 3:
            assert a != a and b != b  # NaN
            continue
        assert a == pytest.approx(b, rel=1e-6) and a == pytest.approx(c, rel=1e-6)
    mixed = [*norms[:2], grad_norm([torch.randn(3)], True)]
    assert type(norms[0]).resolve_all(mixed) == [norm.resolve() for norm in mixed]
