"""The console writer: one readable line per window, in the issue's layout."""

from __future__ import annotations

import io
import math
import re

import pytest

from trainmon.config import load_config
from trainmon.core.aggregate import WindowAggregator
from trainmon.core.events import StepScalars
from trainmon.core.place import ProcessPlace
from trainmon.writers import build_writers
from trainmon.writers.console import (
    MAX_LINE_CHARS,
    MAX_NAME_CHARS,
    ConsoleWriter,
    format_value,
    format_window,
)


def _windows(records: list[StepScalars], steps: int = 50) -> list:  # type: ignore[type-arg]
    aggregator = WindowAggregator(steps)
    windows = aggregator.add(records)
    last = aggregator.close()
    return windows + ([last] if last else [])


def test_full_line_reads_like_the_issue() -> None:
    """A window with every engine metric prints progress with elapsed time and ETA, loss, lr,
    throughput, the breakdown with the step time the parts leave over as "other", and memory,
    every number in one format."""
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
        "perf/data_ms": 0.3,
        "mem/allocated_mb": 1228.8,
        "mem/peak_allocated_mb": 1945.6,
        "eval/acc": 0.91,
    }
    stream = io.StringIO()
    ConsoleWriter(stream, total_steps=2000).write_windows(  # one step a second
        _windows([StepScalars(s, float(s), values) for s in range(451, 501)])
    )
    assert stream.getvalue() == (
        "step 500/2000 (25%) · elapsed 49s · ETA 25m | "
        "loss 2.314 | lr 3e-04 | grad_norm 0.82 | 1930 samples/s | "
        "step 33.1 ms (fwd 9.8 · bwd 17.2 · opt 4.1 · comm 1.2 · data 0.3 · other 0.5) | "
        "mem 1.2 GB (peak 1.9 GB) | eval/acc 0.91\n"
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
    """One format: at most 4 significant digits, no separators below 10,000, k/M/G/T above,
    scientific only below 0.001 or from 10^15; ints below 10,000 exactly."""
    assert format_value(1930.4) == "1930"
    assert format_value(19304.2) == "19.3k"
    assert format_value(1_234_567.0) == "1.235M"
    assert format_value(9999.7) == "10k"  # rounding to 4 digits may reach the next style
    assert format_value(999_960.0) == "1M"
    assert format_value(2**40) == "1.1T"
    assert format_value(0.82156) == "0.8216"
    assert format_value(3e-4) == "3e-04"
    assert format_value(1.23456e-5) == "1.235e-05"
    assert format_value(12) == "12"
    assert format_value(0.0) == "0"
    assert format_value(math.nan) == "nan" and format_value(-math.inf) == "-inf"


NUMBER = re.compile(r"-?(?:\d{1,4}(?:\.\d+)?[kMGT]?|\d(?:\.\d+)?e[-+]\d\d|nan|inf)")


def _numbers(line: str) -> list[str]:
    """Every number-looking token of a console line (step counters and ranks left out)."""
    tokens = re.findall(r"(?<![\w/])-?[\d.][\w.+-]*", line)
    return [t.rstrip("x%") for t in tokens]


def test_every_number_of_a_line_has_the_one_format() -> None:
    """Throughput, TFLOPS, MFU, times, memory and other metrics in a line all read as at most
    4 significant digits with a k/M suffix from 10,000 on: no commas, no long decimals."""
    values = {
        "train/loss": 2.31456789,
        "train/lr": 0.000123456,
        "perf/samples_per_sec": 123456.789,
        "perf/tokens_per_sec": 98765432.1,
        "perf/tflops": 312.3456,
        "perf/mfu": 0.4123456,
        "perf/step_time_ms": 1234.5678,
        "perf/forward_ms": 456.789,
        "mem/rss_mb": 12345.678,
        "mem/peak_rss_mb": 23456.789,
        "eval/acc": 12345.6789,
    }
    line = format_window(_windows([StepScalars(1, 0.0, values)], 1)[0])
    assert "," not in line
    tokens = _numbers(line.split(" | ", 1)[1])
    assert tokens and all(NUMBER.fullmatch(t) for t in tokens), tokens
    digits = [t.split("e")[0].replace(".", "").rstrip("kMGT").lstrip("-0") for t in tokens]
    assert all(len(d) <= 4 for d in digits), tokens
    assert "123.5k samples/s" in line and "98.77M tokens/s" in line
    assert "312.3 TFLOPS (MFU 41.23%)" in line
    assert "step 1.235 s (fwd 0.457 · other 0.778)" in line  # seconds from a 1 s step on
    assert "mem 12.06 GB (peak 22.91 GB)" in line and "eval/acc 12.35k" in line


def test_other_is_the_step_time_the_parts_leave_and_never_negative() -> None:
    """ "other" is the step time minus the parts; when the parts add up to more, it is 0."""
    covered = {"perf/step_time_ms": 40.0, "perf/forward_ms": 10.0, "perf/backward_ms": 23.0}
    over = {"perf/step_time_ms": 40.0, "perf/forward_ms": 30.0, "perf/backward_ms": 20.0}
    lines = [format_window(_windows([StepScalars(1, 0.0, v)], 1)[0]) for v in (covered, over)]
    assert lines[0] == "step 1 | step 40 ms (fwd 10 · bwd 23 · other 7)"
    assert lines[1] == "step 1 | step 40 ms (fwd 30 · bwd 20 · other 0)"


def test_ten_thousand_metrics_make_a_short_line_with_the_essentials_first() -> None:
    """10k distinct names print a line of at most MAX_LINE_CHARS (not 200 KB): the known
    figures, then train/, eval/, perf/ and mem/ metrics before the rest, then "+N more"
    counting exactly the metrics left out."""
    values: dict[str, float] = {f"zz/custom_{i}": float(i) for i in range(10_000)}
    values.update({"train/loss": 1.5, "perf/samples_per_sec": 100.0, "perf/step_time_ms": 10.0})
    values.update({"mem/cache_mb": 5.0, "eval/acc": 0.5, "train/tokens_seen": 3.0})
    line = format_window(_windows([StepScalars(1, 0.0, values)], 1)[0])
    assert len(line) <= MAX_LINE_CHARS
    parts = line.split(" | ")
    assert parts[:4] == ["step 1", "loss 1.5", "100 samples/s", "step 10 ms"]
    assert parts[4:7] == ["train/tokens_seen 3", "eval/acc 0.5", "mem/cache_mb 5"]
    shown = [p for p in parts[7:-1] if p.startswith("zz/custom_")]
    more = re.fullmatch(r"\+(\d+) more", parts[-1])
    assert more is not None and int(more.group(1)) == 10_000 - len(shown)
    assert shown == [f"zz/custom_{i} {format_value(float(i))}" for i in range(len(shown))]


def test_control_characters_in_names_are_escaped() -> None:
    """A name holding a newline, an ANSI colour code or a bidi override prints escaped, on one
    line, and an overlong name is cut."""
    evil = "evil\n\x1b[31mred\u202e"
    values = {evil: 1.0, "x" * 500: 2.0}
    stream = io.StringIO()
    ConsoleWriter(stream).write_windows(_windows([StepScalars(1, 0.0, values)], 1))
    out = stream.getvalue()
    assert out.count("\n") == 1 and "\x1b" not in out and "\u202e" not in out
    assert "evil\\n\\x1b[31mred\\u202e 1" in out
    assert ("x" * (MAX_NAME_CHARS - 1) + "… 2") in out and "x" * MAX_NAME_CHARS not in out


def _line_for(
    place: ProcessPlace, per_rank_output: bool, capsys: pytest.CaptureFixture[str]
) -> str:
    """The line that the console writer built from a config prints on stdout for ``place``."""
    config = load_config(
        {"console": {"enabled": True}, "trainmon": {"per_rank_output": per_rank_output}}
    )
    (writer,) = build_writers(config, place)
    values = {"perf/step_time_ms": 20.0, "perf/comm_ms": 5.0, "perf/forward_ms": 10.0}
    capsys.readouterr()
    writer.write_windows(_windows([StepScalars(10, 0.0, values)], 10))
    return capsys.readouterr().out.rstrip("\n")


def test_every_rank_prints_its_rank_and_one_process_hides_comm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With per_rank_output every rank's line starts with its rank; one process has no comm
    part; several ranks without per-rank output print no rank (only rank 0 prints)."""
    assert _line_for(ProcessPlace(1, 2), True, capsys) == (
        "[rank 1] step 10 | step 20 ms (fwd 10 · comm 5 · other 5)"
    )
    assert _line_for(ProcessPlace(0, 2), False, capsys) == (
        "step 10 | step 20 ms (fwd 10 · comm 5 · other 5)"
    )
    assert _line_for(ProcessPlace(0, 1), True, capsys) == "step 10 | step 20 ms (fwd 10 · other 10)"
