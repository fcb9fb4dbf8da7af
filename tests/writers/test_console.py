"""The console writer: one readable line per window, in the issue's layout."""

from __future__ import annotations

import io
import math

from trainmon.aggregate import WindowAggregator
from trainmon.events import StepScalars
from trainmon.writers.console import ConsoleWriter, format_value


def _windows(records: list[StepScalars], steps: int = 50) -> list:  # type: ignore[type-arg]
    aggregator = WindowAggregator(steps)
    windows = aggregator.add(records)
    last = aggregator.close()
    return windows + ([last] if last else [])


def test_full_line_reads_like_the_issue() -> None:
    """A window with every engine metric prints loss, lr, throughput, breakdown and memory."""
    values = {
        "train/loss": 2.314,
        "train/lr": 3e-4,
        "train/grad_norm": 0.82,
        "perf/samples_per_sec": 1930.0,
        "perf/step_time_ms": 33.1,
        "perf/forward_ms": 9.8,
        "perf/backward_ms": 17.2,
        "perf/optimizer_ms": 4.1,
        "perf/comm_ms": 1.2,
        "perf/data_ms": 0.8,
        "mem/allocated_mb": 1228.8,
        "mem/peak_allocated_mb": 1945.6,
        "eval/acc": 0.91,
    }
    stream = io.StringIO()
    ConsoleWriter(stream, total_steps=2000).write_windows(
        _windows([StepScalars(s, 0.0, values) for s in range(451, 501)])
    )
    assert stream.getvalue() == (
        "step 500/2000 | loss 2.314 | lr 3.0e-04 | grad_norm 0.82 | 1930 samples/s | "
        "step 33.1 ms (fwd 9.8 · bwd 17.2 · opt 4.1 · comm 1.2 · data 0.8) | "
        "mem 1.20 GB (peak 1.90 GB) | eval/acc 0.91\n"
    )


def test_one_line_per_window_with_window_means() -> None:
    """Steps 1..120 with 50-step windows print at 50, 100 and (on close) 120, with means."""
    stream = io.StringIO()
    records = [StepScalars(s, 0.0, {"train/loss": float(s)}) for s in range(1, 121)]
    ConsoleWriter(stream).write_windows(_windows(records))
    lines = stream.getvalue().splitlines()
    assert lines == ["step 50 | loss 25.5", "step 100 | loss 75.5", "step 120 | loss 110.5"]


def test_counters_show_only_when_nonzero() -> None:
    """Dropped events are shown when there were some, and not otherwise."""
    stream = io.StringIO()
    records = [
        StepScalars(10, 0.0, {"trainmon/dropped_events": 0}),
        StepScalars(20, 0.0, {"trainmon/dropped_events": 12}),
    ]
    ConsoleWriter(stream).write_windows(_windows(records, 10))
    assert stream.getvalue().splitlines() == ["step 10", "step 20 | dropped events 12"]


def test_number_formats() -> None:
    """Numbers are short and readable: thousands separators, scientific only at extremes."""
    assert format_value(1930.4) == "1930"
    assert format_value(19304.2) == "19,304"
    assert format_value(3e-4) == "3.00e-04"
    assert format_value(12) == "12"
    assert format_value(math.nan) == "nan"
