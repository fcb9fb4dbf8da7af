"""Rates over a span of steps are the work done over the time it took, wherever they are shown.

Steps alternate 10 ms and 190 ms of sleep at 16 samples each: the truth is about 160 samples/s,
while the plain mean of the per-step rates (about 1,600 and 84) would say about 840.
"""

from __future__ import annotations

import csv
import itertools
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon
from trainmon.core.aggregate import WindowAggregator, WindowStats
from trainmon.core.cross_rank import pack_window, summarise_ranks
from trainmon.core.events import StepScalars

SLEEPS_S = (0.19, 0.01)  # odd steps 10 ms, even steps 190 ms
SAMPLES_PER_STEP = 16
WINDOW = 10
STEPS = 20
_SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_number(text: str) -> float:
    """A number as the console and summary print it (``157.3``, ``19.3k``)."""
    match = re.fullmatch(r"(-?[\d.]+(?:e[-+]\d+)?)([kMGT]?)", text)
    assert match is not None, text
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def console_rates(text: str, unit: str = "samples/s") -> list[float]:
    """The rate of every console line, in order."""
    return [parse_number(m) for m in re.findall(rf"\| (\S+) {re.escape(unit)}", text)]


def summary_rate(run: Path, label: str = "samples/s") -> float:
    """The throughput figure of ``trainmon summary RUN``, run as a user would."""
    result = subprocess.run(
        [sys.executable, "-m", "trainmon", "summary", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("throughput"))
    match = re.search(rf"(\S+) {re.escape(label)}(?: |$)", line)
    assert match is not None, line
    return parse_number(match.group(1))


def windows_of(aggregator: WindowAggregator, records: list[StepScalars]) -> list[WindowStats]:
    """Every window ``records`` make, the last one closed as at shutdown."""
    done = aggregator.add(records)
    last = aggregator.close()
    return [*done, *([last] if last is not None else [])]


def journal_windows(run: Path) -> list[dict[str, Any]]:
    """The journal's window records."""
    return [r for r in trainmon.read_journal(run) if r["kind"] == "window"]


def window_means(run: Path, metric: str = "perf/samples_per_sec") -> list[float]:
    """The mean of ``metric`` in each of the journal's window records."""
    return [float(w["stats"][metric]["mean"]) for w in journal_windows(run)]


def uneven_loop(monitor: trainmon.Monitor, steps: int = STEPS) -> tuple[float, list[float]]:
    """Steps of uneven length, each logging its time and rate as the engine does.

    Returns the loop's start and each step's end (``perf_counter``), measured here.
    """
    start = previous = time.perf_counter()
    ends = []
    for step in range(1, steps + 1):
        time.sleep(SLEEPS_S[step % 2])
        now = time.perf_counter()
        step_s, previous = now - previous, now
        monitor.step = step
        monitor.log(
            {
                "perf/step_time_ms": step_s * 1e3,
                "perf/samples_per_sec": SAMPLES_PER_STEP / step_s,
                "perf/tokens_per_sec": 128 * SAMPLES_PER_STEP / step_s,
            }
        )
        ends.append(now)
    return start, ends


def measured_windows(start: float, ends: list[float]) -> list[float]:
    """Samples counted over wall time measured, per window of WINDOW steps."""
    edges = [start, *ends[WINDOW - 1 :: WINDOW]]
    return [SAMPLES_PER_STEP * WINDOW / (b - a) for a, b in itertools.pairwise(edges)]


def test_window_mean_of_a_rate_is_work_over_time() -> None:
    """A window's mean of samples/s is samples over time (160 here), not the mean of rates;
    other metrics keep their plain mean, and min/max stay per-step values."""
    aggregator = WindowAggregator(WINDOW)
    records = []
    for step in range(1, WINDOW + 1):
        step_ms = 10.0 if step % 2 else 190.0
        rate = SAMPLES_PER_STEP / (step_ms / 1e3)
        records.append(
            StepScalars(
                step,
                0.0,
                {"perf/step_time_ms": step_ms, "perf/samples_per_sec": rate, "train/loss": rate},
            )
        )
    (window,) = windows_of(aggregator, records)
    counted = (
        SAMPLES_PER_STEP * WINDOW / (sum(10.0 if s % 2 else 190.0 for s in range(1, 11)) / 1e3)
    )
    stats = window.metrics["perf/samples_per_sec"]
    assert stats.mean == pytest.approx(counted, rel=1e-12)
    assert (stats.min, stats.max) == (SAMPLES_PER_STEP / 0.19, SAMPLES_PER_STEP / 0.01)
    assert window.metrics["train/loss"].mean == pytest.approx((1600 + 16 / 0.19) / 2)


def test_rates_logged_apart_from_the_step_time_are_weighted_by_it() -> None:
    """A rate logged in a later call at the same step is weighted by that step's time; a
    window with no step time keeps the plain mean."""
    aggregator = WindowAggregator(4)
    records = []
    for step, step_ms in zip(range(1, 5), (10.0, 190.0, 10.0, 190.0), strict=True):
        records.append(StepScalars(step, 0.0, {"perf/step_time_ms": step_ms}))
        records.append(StepScalars(step, 0.0, {"perf/images_per_sec": 8 / (step_ms / 1e3)}))
    for step in range(5, 9):
        records.append(StepScalars(step, 0.0, {"perf/images_per_sec": float(step)}))
    windows = windows_of(aggregator, records)
    assert windows[0].metrics["perf/images_per_sec"].mean == pytest.approx(8 * 4 / 0.4)
    assert windows[1].metrics["perf/images_per_sec"].mean == pytest.approx(6.5)


def test_console_journal_window_writers_and_summary_show_samples_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With uneven steps, the console line, the journal's window records, a CSV writer set to
    "every": "window" and `trainmon summary` are within 10% of the samples counted over the
    wall time measured here."""
    config = {
        "steps_per_print": WINDOW,
        "console": {"enabled": True},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "csv_monitor": {
            "enabled": True,
            "output_path": str(tmp_path / "csv"),
            "job_name": "job",
            "every": "window",
        },
    }
    with trainmon.Monitor(config) as monitor:
        start, ends = uneven_loop(monitor)
    truth = measured_windows(start, ends)
    assert truth[0] == pytest.approx(160, rel=0.15)  # the sleeps are what the test says
    shown = console_rates(capsys.readouterr().out)
    assert shown == pytest.approx(truth, rel=0.1)
    tokens = [w["stats"]["perf/tokens_per_sec"]["mean"] for w in journal_windows(tmp_path / "job")]
    assert tokens == pytest.approx([128 * t for t in truth], rel=0.1)
    windows = [
        w["stats"]["perf/samples_per_sec"]["mean"] for w in journal_windows(tmp_path / "job")
    ]
    assert windows == pytest.approx(truth, rel=0.1)
    with open(tmp_path / "csv" / "job" / "perf_samples_per_sec.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [float(row[-1]) for row in rows] == pytest.approx(truth, rel=0.1)
    overall = SAMPLES_PER_STEP * STEPS / (ends[-1] - start)
    assert summary_rate(tmp_path / "job") == pytest.approx(overall, rel=0.1)
    assert summary_rate(tmp_path / "job", "tokens/s") == pytest.approx(128 * overall, rel=0.1)


def test_summary_of_tensorboard_files_weights_rates_by_time(tmp_path: Path) -> None:
    """`trainmon summary` of TensorBoard event files (every step, and one mean per window)
    gives samples over time, within 10% of what the test measured."""
    pytest.importorskip("tensorboard")
    for every in ("step", "window"):
        section = {"enabled": True, "output_path": str(tmp_path / every), "job_name": "j"}
        config = {
            "steps_per_print": WINDOW,
            "console": {"enabled": False},
            "tensorboard": {**section, "every": every},
        }
        with trainmon.Monitor(config) as monitor:
            start, ends = uneven_loop(monitor, steps=25)  # the last window is half as long
        overall = SAMPLES_PER_STEP * 25 / (ends[-1] - start)
        assert summary_rate(tmp_path / every / "j") == pytest.approx(overall, rel=0.1)


def test_summary_weights_a_rate_per_window_by_the_window_time(tmp_path: Path) -> None:
    """A rate logged once per window (like perf/job_samples_per_sec) counts in the run's figure
    by the time its window took: windows of 10 fast steps and of 10 slow ones at 32 samples a
    step give the samples over the total time, not the mean of the two window rates."""
    config = {
        "steps_per_print": WINDOW,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
    }
    times = [10.0] * 10 + [190.0] * 10 + [10.0] * 5
    with trainmon.Monitor(config) as monitor:
        for step, step_ms in enumerate(times, start=1):
            monitor.log({"perf/step_time_ms": step_ms}, step=step)
            if step % WINDOW == 0 or step == len(times):
                span = times[(step - 1) // WINDOW * WINDOW : step]
                job = 32 * len(span) / (sum(span) / 1e3)
                monitor.log({"perf/job_samples_per_sec": job}, step=step)
    counted = 32 * len(times) / (sum(times) / 1e3)
    assert summary_rate(tmp_path / "job", "job samples/s") == pytest.approx(counted, rel=1e-3)


def test_job_rate_is_every_ranks_work_over_the_slowest_ranks_time() -> None:
    """Across ranks, the job's samples/s is all samples over the longest elapsed time: a rank
    doing 100 samples in 1 s and one doing 200 samples in 2 s make 150 samples/s, not 200."""
    rows = []
    for samples, step_ms in ((10, 100.0), (20, 200.0)):  # per step, 10 steps each
        aggregator = WindowAggregator(WINDOW)
        records = [
            StepScalars(
                step,
                0.0,
                {"perf/step_time_ms": step_ms, "perf/samples_per_sec": samples / (step_ms / 1e3)},
            )
            for step in range(1, WINDOW + 1)
        ]
        (window,) = windows_of(aggregator, records)
        rows.append(pack_window(window))
    out = summarise_ranks(rows)
    assert out["perf/job_samples_per_sec"] == pytest.approx((100 + 200) / 2.0)
    assert out["perf/samples_per_sec/mean"] == pytest.approx(100.0)


class SleepyModel(torch.nn.Module):
    """A linear model whose forward sleeps 10 ms and 190 ms in turn (a stand-in for uneven
    steps: variable sequence lengths, a slow batch now and then)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(SLEEPS_S[self.calls % 2])
        loss: torch.Tensor = self.linear(inputs).pow(2).mean()
        return loss


@pytest.mark.slow
def test_engine_rates_are_samples_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under trainmon.initialize with a forward that sleeps 10 ms and 190 ms in turn, the console
    line, the journal's window records and `trainmon summary` give the samples counted over the
    wall time measured here, within 10%; with one process the breakdown has no comm part."""
    config = {
        "train_micro_batch_size_per_gpu": SAMPLES_PER_STEP,
        "gradient_accumulation_steps": 1,
        "steps_per_print": WINDOW,
        "wall_clock_breakdown": True,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "console": {"enabled": True},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
    }
    model = SleepyModel()
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    inputs = torch.randn(SAMPLES_PER_STEP, 4)
    ends = []
    start = time.perf_counter()
    for _ in range(STEPS):
        loss = engine(inputs)
        engine.backward(loss)
        engine.step()
        ends.append(time.perf_counter())
    engine.close()
    truth = measured_windows(start, ends)
    out = capsys.readouterr().out
    assert console_rates(out) == pytest.approx(truth, rel=0.1)
    assert window_means(tmp_path / "job") == pytest.approx(truth, rel=0.1)
    overall = SAMPLES_PER_STEP * STEPS / (ends[-1] - start)
    assert summary_rate(tmp_path / "job") == pytest.approx(overall, rel=0.1)
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(lines) == 2 and all("(fwd " in line and "other " in line for line in lines)
    assert not any("comm" in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("save_at", [8, 10])  # at a window's end (4 steps) and inside one
def test_job_rate_after_a_two_rank_resume_is_the_sum_of_the_ranks_rates(
    tmp_path: Path, save_at: int
) -> None:
    """Two ranks save at ``save_at``, run to step 14 and die; the resumed job runs to step 24.
    The journal counts each step once, from the latest attempt: ``trainmon summary``'s job
    samples/s on rank 0's journal is the sum of the ranks' samples/s (each rank's own journal)
    within 5%, and both ranks' samples counted over the kept steps' wall time within 10%; the
    TensorBoard folders give the same figures."""
    from conftest import printed_objects, torchrun

    worker = Path(__file__).parent / "scripts" / "resume_ranks_worker.py"
    reports = []
    for run in (1, 2):
        result = torchrun(worker, 2, str(tmp_path), str(run), str(save_at), timeout=240)
        reports += printed_objects(result.stdout)
    assert sorted((r["run"], r["rank"]) for r in reports) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    first = [r for r in reports if r["run"] == 1]
    second = [r for r in reports if r["run"] == 2]
    assert [len(r["ends"]) for r in first + second] == [14, 14, 24 - save_at, 24 - save_at]
    kept = max(r["ends"][save_at - 1] - r["start"] for r in first)  # steps 1..save_at
    redone = max(r["ends"][-1] - r["start"] for r in second)  # steps save_at+1..24
    truth = 2 * 16 * 24 / (kept + redone)
    folder = tmp_path / "job"
    ranks = [summary_rate(folder / f"rank-{rank}") for rank in (0, 1)]
    job = summary_rate(folder / "rank-0", "job samples/s")
    assert job == pytest.approx(sum(ranks), rel=0.05), (job, ranks)
    assert job == pytest.approx(truth, rel=0.1), (job, truth)
    board = tmp_path / "tb" / "job"
    shown = [summary_rate(board / f"rank-{rank}") for rank in (0, 1)]
    assert shown == pytest.approx(ranks, rel=1e-3)
    assert summary_rate(board / "rank-0", "job samples/s") == pytest.approx(job, rel=1e-3)
