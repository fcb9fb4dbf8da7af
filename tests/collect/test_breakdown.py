"""The step-time breakdown: disjoint parts that add up to no more than the step, measured against
sleeps of known length; the instrument's phases nest; train/loss is the data-parallel mean."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon
from conftest import printed_objects
from trainmon.collect.instrument import StepInstrument

SCRIPTS = Path(__file__).parents[1] / "scripts"
PARTS = (
    "perf/forward_ms",
    "perf/backward_inner_ms",
    "perf/optimizer_ms",
    "perf/comm_ms",
    "perf/data_ms",
    "perf/between_steps_ms",
)


def per_step(folder: Path) -> dict[int, dict[str, Any]]:
    """``{step: {metric: value}}`` from a journal, read with trainmon's own reader."""
    out: dict[int, dict[str, Any]] = {}
    for record in trainmon.read_journal(folder):
        if record["kind"] == "scalars":
            out.setdefault(record["step"], {}).update(record["values"])
    return out


def config(base: Path, **extra: Any) -> dict[str, Any]:
    """Breakdown on, a JSONL journal under ``base``, console off."""
    return {
        "steps_per_print": 2,
        "wall_clock_breakdown": True,
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
        **extra,
    }


class Sleeps:
    """The sleeps of each step, measured by the test itself (``time.sleep`` may overshoot)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = [{}]

    def sleep(self, part: str, seconds: float) -> None:
        start = time.perf_counter()
        time.sleep(seconds)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        current = self.steps[-1]
        current[part] = current.get(part, 0.0) + elapsed_ms

    def next_step(self) -> None:
        self.steps.append({})


def test_parts_match_known_sleeps_and_fit_in_the_step(tmp_path: Path) -> None:
    """Sleeps of 30 ms in the data loader, 20 ms in the forward and 25 ms in the optimizer step
    show up as perf/data_ms, perf/forward_ms and perf/optimizer_ms within 20%, neither the
    backward nor the gap after step() is charged with them, and every step's parts add up to
    at most its step time."""
    sleeps = Sleeps()

    class SlowData(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
            sleeps.sleep("perf/data_ms", 0.03)
            return torch.ones(8) * index / 64, torch.zeros(1)

    class SlowModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            sleeps.sleep("perf/forward_ms", 0.02)
            return torch.nn.functional.mse_loss(self.linear(x), y)

    class SlowSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            sleeps.sleep("perf/optimizer_ms", 0.025)
            return super().step(closure)

    model = SlowModel()
    engine, _, loader, _ = trainmon.initialize(
        model=model,
        optimizer=SlowSGD(model.parameters(), lr=0.01),
        training_data=SlowData(),
        config=config(tmp_path, train_micro_batch_size_per_gpu=1),
    )
    with engine:
        for index, (x, y) in enumerate(loader):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            sleeps.next_step()
            if index == 5:
                break
    logged = per_step(tmp_path / "job")
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    for step, values in logged.items():
        truth = sleeps.steps[step - 1]
        for part, slept_ms in truth.items():
            assert values[part] >= slept_ms, (step, part, values[part], truth)
        parts = sum(values.get(p, 0.0) for p in PARTS)
        assert parts <= values["perf/step_time_ms"] * 1.05 + 1.0, (step, values)
    # within 20% of the sleep (the median step, as a shared machine can stall any one step)
    for part in ("perf/data_ms", "perf/forward_ms", "perf/optimizer_ms"):
        ratios = [logged[s][part] / sleeps.steps[s - 1][part] for s in logged]
        assert statistics.median(ratios) <= 1.2, (part, ratios)
    assert statistics.median(logged[s]["perf/backward_inner_ms"] for s in logged) < 10.0
    # the loader's waits pause the gap after step(): only the loop's own time is left there
    assert statistics.median(logged[s]["perf/between_steps_ms"] for s in logged) < 10.0


def test_nested_phases_are_disjoint_and_partial_drivers_work(tmp_path: Path) -> None:
    """A comm phase inside backward is taken out of the backward, so the parts never exceed the
    step; a driver that only reports losses and step ends still gets loss, time and samples."""
    with trainmon.Monitor(config(tmp_path)) as monitor:
        instrument = StepInstrument(monitor, samples_per_step=8)
        started = time.perf_counter()
        instrument.step_begin()
        sleeps = Sleeps()
        instrument.backward_begin()
        sleeps.sleep("perf/backward_inner_ms", 0.01)
        instrument.comm_begin()
        sleeps.sleep("perf/comm_ms", 0.02)
        instrument.comm_end()
        sleeps.sleep("perf/backward_inner_ms", 0.01)
        instrument.backward_end()
        instrument.record_loss(torch.tensor(2.0))
        instrument.record_loss(4.0)
        instrument.step_end(1)
        elapsed_ms = (time.perf_counter() - started) * 1e3
        partial = StepInstrument(monitor, samples_per_step=8, breakdown=False)
        partial.record_loss(torch.tensor(1.0))
        partial.forward_end()  # an end whose begin the driver never saw is ignored
        partial.step_end(2, lr=0.5)  # no hook marked its start: no step time
        time.sleep(0.01)
        partial.step_end(3)
        partial.close()
        instrument.close()
    logged = per_step(tmp_path / "job")
    first, second, third = logged[1], logged[2], logged[3]
    assert first["train/loss"] == pytest.approx(3.0)
    for part, slept_ms in sleeps.steps[0].items():
        assert slept_ms <= first[part] <= slept_ms + 2.0, (part, first[part], slept_ms)
    assert first["perf/backward_allreduce_ms"] == first["perf/comm_ms"]
    assert first["perf/step_time_ms"] <= elapsed_ms
    assert sum(first.get(p, 0.0) for p in PARTS) <= first["perf/step_time_ms"]
    assert second["train/loss"] == 1.0 and second["train/lr"] == 0.5
    assert "perf/step_time_ms" not in second and "perf/samples_per_sec" not in second
    assert third["perf/step_time_ms"] >= 10.0
    assert third["perf/samples_per_sec"] == pytest.approx(8 / (third["perf/step_time_ms"] / 1e3))
    assert not any(p in second or p in third for p in PARTS)


@pytest.mark.slow
def test_two_ranks_with_a_straggler_parts_fit_and_loss_is_the_mean(tmp_path: Path) -> None:
    """Under torchrun with rank 1 sleeping 20 ms per step: on every rank and step the parts add
    up to at most the step time (x 1.05 + 1 ms); rank 0's comm wait shows rank 1's delay while
    its backward does not; train/loss on both ranks is the mean of the ranks' local losses."""
    from conftest import torchrun

    result = torchrun(SCRIPTS / "breakdown_worker.py", 2, str(tmp_path), timeout=240)
    reports = {r["rank"]: r for r in printed_objects(result.stdout)}
    assert set(reports) == {0, 1}
    logged = {rank: per_step(tmp_path / "job" / f"rank-{rank}") for rank in (0, 1)}
    steps = len(reports[0]["losses"])
    for rank in (0, 1):
        assert sorted(logged[rank]) == list(range(1, steps + 1))
        for step, values in logged[rank].items():
            parts = sum(values.get(p, 0.0) for p in PARTS)
            assert parts <= values["perf/step_time_ms"] * 1.05 + 1.0, (rank, step, values)
            # no loader of the engine's: the gap after step() is not called a data wait
            assert "perf/data_ms" not in values and "perf/between_steps_ms" in values, values
            # the engine's gradient all-reduce is a part of all communication, never more
            assert values["perf/backward_allreduce_ms"] <= values["perf/comm_ms"], values
            local = [statistics.fmean(reports[r]["losses"][step - 1]) for r in (0, 1)]
            assert values["train/loss"] == pytest.approx(statistics.fmean(local), rel=1e-5)
    later = range(3, steps + 1)  # past start-up
    fast_comm = statistics.median(logged[0][s]["perf/comm_ms"] for s in later)
    slow_comm = statistics.median(logged[1][s]["perf/comm_ms"] for s in later)
    fast_bwd = statistics.median(logged[0][s]["perf/backward_inner_ms"] for s in later)
    slow_fwd = statistics.median(logged[1][s]["perf/forward_ms"] for s in later)
    assert fast_comm >= 15.0 and fast_comm - slow_comm >= 12.0, (fast_comm, slow_comm)
    assert fast_bwd < 10.0 and slow_fwd >= 20.0
    assert reports[0]["losses"] != reports[1]["losses"]


class FakeTime:
    """A clock the test advances by hand, in seconds."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phase_clock_nesting_unmatched_ends_and_collectives_inside_a_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nested phases pause the outer one; an end without a begin is ignored; ending an outer
    phase closes inner ones left open; collective time counted by the comm source while a phase
    runs is taken out of that phase; an open phase is cut at take() and keeps running."""
    from trainmon.collect.instrument import clock as clock_module
    from trainmon.collect.instrument.clock import (
        BACKWARD,
        COMM,
        DATA,
        FORWARD,
        OPTIMIZER,
        HostPhaseClock,
    )

    fake = FakeTime()
    monkeypatch.setattr(clock_module, "_now", fake)
    clock = HostPhaseClock(comm_aware=True)
    clock.end(FORWARD)  # never begun: ignored
    clock.begin(FORWARD)
    fake.now += 0.010
    clock.add_comm_ms(4.0)  # a 4 ms all_reduce inside the forward (counted as comm elsewhere)
    clock.end(FORWARD)
    clock.begin(BACKWARD)
    fake.now += 0.005
    clock.begin(COMM)
    fake.now += 0.003
    clock.add_comm_ms(3.0)
    clock.begin(DATA)  # left open: closed by the end of backward
    fake.now += 0.002
    clock.end(BACKWARD)
    clock.begin(OPTIMIZER)
    fake.now += 0.001
    parts = clock.take(fake.now)
    assert parts == pytest.approx([2.0, 6.0, 5.0, 3.0, 1.0, 0.0])  # data .. opt, between
    fake.now += 0.002
    clock.end(OPTIMIZER)
    assert clock.take(fake.now) == pytest.approx([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])


@pytest.mark.parametrize("kind", ["host", "device"])
def test_a_data_wait_inside_the_gap_after_step_is_data_not_between_steps(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The gap from step() to the next forward (between-steps) pauses while a loader the
    driver sees waits (data), on the host clock and on the device clock's host timers."""
    from types import SimpleNamespace

    from trainmon.collect import device_timing
    from trainmon.collect.instrument import clock as clock_module
    from trainmon.collect.instrument.clock import (
        BETWEEN,
        DATA,
        FORWARD,
        PHASES,
        DevicePhaseClock,
        HostPhaseClock,
    )

    fake = FakeTime()
    monkeypatch.setattr(clock_module, "_now", fake)
    monkeypatch.setattr(device_timing, "time", SimpleNamespace(perf_counter=fake))
    timers: list[Any] = [device_timing.HostSpanTimer() for _ in PHASES]
    clock = HostPhaseClock() if kind == "host" else DevicePhaseClock(timers)
    clock.begin(BETWEEN)  # step() returned
    fake.now += 0.004  # the user's code
    clock.begin(DATA)  # the loader's wait
    fake.now += 0.030
    clock.end(DATA)
    fake.now += 0.001
    clock.end(BETWEEN)  # the next forward
    clock.begin(FORWARD)
    fake.now += 0.002
    clock.end(FORWARD)
    parts = clock.take(fake.now)
    assert parts[DATA] == pytest.approx(30.0) and parts[BETWEEN] == pytest.approx(5.0)
    assert parts[FORWARD] == pytest.approx(2.0)


def test_step_end_takes_per_step_work_and_extra_metrics(tmp_path: Path) -> None:
    """step_end(samples=, tokens=, extras=) logs that step's rates over its own time and the
    extra pairs at the same step; step_begin starts the first step's clock."""
    with trainmon.Monitor(config(tmp_path, wall_clock_breakdown=False)) as monitor:
        instrument = StepInstrument(monitor)
        instrument.step_begin()
        time.sleep(0.01)
        instrument.step_end(7, samples=4, tokens=100, extras=[("eval/acc", 0.5)])
        instrument.close()
    values = per_step(tmp_path / "job")[7]
    seconds = values["perf/step_time_ms"] / 1e3
    assert seconds >= 0.01
    assert values["perf/samples_per_sec"] == pytest.approx(4 / seconds)
    assert values["perf/tokens_per_sec"] == pytest.approx(100 / seconds)
    assert values["eval/acc"] == 0.5 and "train/loss" not in values
