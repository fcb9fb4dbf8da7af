"""Progress lines: at the end of every window (``steps_per_print`` steps), one readable line.

``step 500/2000 | loss 2.314 | lr 3.0e-04 | grad_norm 0.82 | 1,930 samples/s |
step 33.1 ms (fwd 9.8 · bwd 17.2 · opt 4.1 · comm 1.2 · data 0.8) | mem 1.2 GB (peak 1.9)``

Known metrics get a short label and the statistic that reads best (mean for rates and times,
last for the learning rate and memory, max for peaks); any other metric follows as
``name mean``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from trainmon.aggregate import MetricStats, WindowStats
from trainmon.events import Number, StepScalars
from trainmon.writers.base import Writer

_BREAKDOWN = (
    ("fwd", "perf/forward_ms"),
    ("bwd", "perf/backward_ms"),
    ("opt", "perf/optimizer_ms"),
    ("comm", "perf/comm_ms"),
    ("data", "perf/data_ms"),
)
_COUNTERS = ("trainmon/dropped_events", "trainmon/writer_errors")
_CROSS_RANK_SUFFIXES = ("/min", "/mean", "/max", "/argmax_rank", "_rank", "straggler_ratio")
#: The console names the slowest rank when its busy time is this many times the median's.
STRAGGLER_SHOWN_AT = 1.2


def format_value(value: Number) -> str:
    """Short human form: 4 significant digits, scientific for very small or large numbers."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e12):
        return f"{value:.2e}"
    if magnitude >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _ms(value: float) -> str:
    return f"{value:.1f}" if math.isfinite(value) and abs(value) < 1e4 else format_value(value)


def _memory(mb: float) -> str:
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def _pick(metrics: Mapping[str, MetricStats], name: str, stat: str = "mean") -> float | None:
    found = metrics.get(name)
    return None if found is None else float(getattr(found, stat))


def format_window(window: WindowStats, total_steps: int | None = None) -> str:
    """The console line for one window."""
    metrics = window.metrics
    used: set[str] = set()

    def take(name: str, stat: str = "mean") -> float | None:
        value = _pick(metrics, name, stat)
        if value is not None:
            used.add(name)
        return value

    step = f"step {window.last_step}" + (f"/{total_steps}" if total_steps else "")
    parts = [step]
    simple: tuple[tuple[str, str, str, Callable[[float], str]], ...] = (
        ("loss", "train/loss", "mean", format_value),
        ("lr", "train/lr", "last", lambda v: f"{v:.1e}"),
        ("grad_norm", "train/grad_norm", "mean", format_value),
        ("loss_scale", "train/loss_scale", "last", format_value),
    )
    for label, name, stat, fmt in simple:
        value = take(name, stat)
        if value is not None:
            parts.append(f"{label} {fmt(value)}")
    for name, unit in (("perf/samples_per_sec", "samples/s"), ("perf/tokens_per_sec", "tokens/s")):
        value = take(name)
        job = take(name.replace("perf/", "perf/job_"), "last")
        if value is not None:
            parts.append(
                f"{format_value(value)} {unit}" + (f" (job {format_value(job)})" if job else "")
            )
    tflops, mfu = take("perf/tflops"), take("perf/mfu")
    if tflops is not None:
        parts.append(f"{tflops:.1f} TFLOPS" + (f" (MFU {mfu:.1%})" if mfu is not None else ""))
    step_ms = take("perf/step_time_ms")
    pieces = [(label, take(name)) for label, name in _BREAKDOWN]
    breakdown = " · ".join(f"{label} {_ms(v)}" for label, v in pieces if v is not None)
    if step_ms is not None:
        parts.append(f"step {_ms(step_ms)} ms" + (f" ({breakdown})" if breakdown else ""))
    elif breakdown:
        parts.append(f"time ms ({breakdown})")
    now = take("mem/allocated_mb", "last")
    peak = take("mem/peak_allocated_mb", "max")
    rss, peak_rss = take("mem/rss_mb", "last"), take("mem/peak_rss_mb", "max")
    if now is None:
        now, peak = rss, peak_rss
    if now is not None:
        parts.append(f"mem {_memory(now)}" + (f" (peak {_memory(peak)})" if peak else ""))
    ratio = take("perf/straggler_ratio", "last")
    slowest = take("perf/slowest_rank", "last")
    if ratio is not None and slowest is not None and ratio >= STRAGGLER_SHOWN_AT:
        parts.append(f"slowest rank {int(slowest)} ({ratio:.2f}x median busy time)")
    for name in _COUNTERS:
        value = take(name, "last")
        if value:
            parts.append(f"{name.split('/')[-1].replace('_', ' ')} {int(value)}")
    for name, stats in metrics.items():
        if name not in used and not name.endswith(_CROSS_RANK_SUFFIXES):
            parts.append(f"{name} {format_value(stats.mean)}")
    return " | ".join(parts)


class ConsoleWriter(Writer):
    """Prints one line per completed window; per-step records are not printed."""

    kind = "console"

    def __init__(self, stream: TextIO | None = None, total_steps: int | None = None) -> None:
        self._stream = stream
        self.total_steps = total_steps
        self.location = "stdout" if stream is None else getattr(stream, "name", "stream")

    def write(self, records: Sequence[StepScalars]) -> None:
        pass

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        stream = self._stream or sys.stdout
        for window in windows:
            stream.write(format_window(window, self.total_steps) + "\n")
        stream.flush()

    def flush(self) -> None:
        (self._stream or sys.stdout).flush()

    def close(self) -> None:
        self.flush()
