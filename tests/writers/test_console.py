"""The console writer: one readable line per steps_per_print interval."""

from __future__ import annotations

import io
import math

from trainmon.events import StepScalars
from trainmon.writers.console import ConsoleWriter, format_value


def test_prints_once_per_interval_with_latest_values() -> None:
    """Lines appear at steps 0, 50, 100 with the latest value of every metric."""
    stream = io.StringIO()
    writer = ConsoleWriter(50, stream)
    writer.write(
        [StepScalars(s, 0.0, {"train/loss": 1.0 / (s + 1), "train/lr": 3e-4}) for s in range(120)]
    )
    lines = stream.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["step 0", "step 50", "step 100"]
    assert lines[1] == "step 50 | train/loss 0.01961 | train/lr 3.00e-04"


def test_steps_that_skip_multiples_still_print() -> None:
    """When logged steps jump over a multiple, the first step past it prints."""
    stream = io.StringIO()
    writer = ConsoleWriter(10, stream)
    writer.write([StepScalars(s, 0.0, {"x": 1.0}) for s in (3, 7, 11, 14, 23)])
    assert [line.split(" | ")[0] for line in stream.getvalue().splitlines()] == [
        "step 3",
        "step 11",
        "step 23",
    ]


def test_number_formats() -> None:
    """Numbers are short and readable: thousands separators, scientific only at extremes."""
    assert format_value(1930.4) == "1930"
    assert format_value(19304.2) == "19,304"
    assert format_value(3e-4) == "3.00e-04"
    assert format_value(12) == "12"
    assert format_value(math.nan) == "nan"
