"""Progress lines: one readable line per window (the docs show real ones).

Each known metric gets a short label and the statistic that reads best (means for times, the
window's work over its time for rates, last for the learning rate and memory, max for peaks).
The line is capped at :data:`MAX_LINE_CHARS` (``+N more``) and names are escaped, so that no
metric set can flood or break a terminal; every number goes through :func:`format_value`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.events import Extra, Number, Progress, StepScalars
from trainmon.core.goodput_live import BADPUT_PREFIX, GOODPUT_METRIC
from trainmon.core.writer import Writer

#: The step's disjoint parts (label, metric, older name of the same part); what they leave of
#: the step time is shown as "other".
_BREAKDOWN = (
    ("fwd", "perf/forward_ms", ""),
    ("bwd", "perf/backward_inner_ms", "perf/backward_ms"),
    ("opt", "perf/optimizer_ms", ""),
    ("comm", "perf/comm_ms", ""),
    ("data", "perf/data_ms", ""),
    ("between", "perf/between_steps_ms", ""),
)
_COMM = "perf/comm_ms"
#: Shown inside ``comm`` already: the engine's gradient all-reduce (DeepSpeed's name).
_ALLREDUCE = "perf/backward_allreduce_ms"
_COUNTERS = ("trainmon/dropped_events", "trainmon/writer_errors")
_CROSS_RANK_SUFFIXES = ("/min", "/mean", "/max", "/argmax_rank", "_rank", "straggler_ratio")
#: Families whose other metrics are shown first, in this order.
_FIRST_FAMILIES = ("train/", "eval/", "perf/", "mem/")
#: The console names the slowest rank when its busy time is this many times the median's.
STRAGGLER_SHOWN_AT = 1.2
#: A line stops adding further metrics at this length and says how many it left out.
MAX_LINE_CHARS = 400
#: Longer metric names are cut to this many characters (ending in ``…``).
MAX_NAME_CHARS = 64
_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_value(value: Number) -> str:
    """The one number format of the line: 4 significant digits at most.

    ``0.8215``, ``33.1``, ``1930``; from 10,000 on a suffix (``19.3k``, ``1.25M``, up to
    ``T``); below 0.001 and from 10^15 on, scientific (``3e-04``, ``1.25e+16``); ints below
    10,000 exactly; ``nan``, ``inf``, ``-inf``.
    """
    if isinstance(value, int) and -10_000 < value < 10_000:
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    rounded = float(f"{value:.4g}")
    magnitude = abs(rounded)
    if magnitude < 1e-3 or magnitude >= 1e15:
        mantissa, exponent = f"{rounded:.3e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"
    if magnitude < 1e4:
        return f"{rounded:.4g}"
    for scale, suffix in _SUFFIXES:
        if magnitude >= scale:
            return f"{float(f'{rounded / scale:.4g}'):.4g}{suffix}"
    return f"{rounded:.4g}"  # not reached: magnitude >= 1e4 has a suffix


def printable(name: str) -> str:
    """``name`` with control and other non-printable characters escaped, and cut if too long."""
    if not name.isprintable():
        name = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
    if len(name) > MAX_NAME_CHARS:
        name = name[: MAX_NAME_CHARS - 1] + "…"
    return name


def _memory(mb: float) -> str:
    return f"{format_value(mb / 1024)} GB" if mb >= 1024 else f"{format_value(mb)} MB"


def _pick(metrics: Mapping[str, MetricStats], name: str, stat: str = "mean") -> float | None:
    found = metrics.get(name)
    return None if found is None else float(getattr(found, stat))


def _breakdown(
    step_ms: float | None, pieces: Sequence[tuple[str, float]]
) -> tuple[str, str] | None:
    """``("step 33.1 ms", "fwd 9.8 · ... · other 0.2")``; seconds from a 1,000 ms step on.

    The parts are given to the step time's last digit, so they line up with it and tiny parts
    read ``0.0`` rather than ``0.008201``.
    """
    if step_ms is None and not pieces:
        return None
    scale, unit = (1e-3, "s") if step_ms is not None and step_ms >= 1000 else (1.0, "ms")
    shown = list(pieces)
    if step_ms is not None and pieces and math.isfinite(step_ms):
        other = step_ms - math.fsum(v for _, v in pieces)
        if math.isfinite(other):  # never below 0; rounding noise is 0
            shown.append(("other", other if other > 1e-9 * step_ms else 0.0))
    if step_ms is None or not math.isfinite(step_ms):
        text = " · ".join(f"{label} {format_value(v * scale)}" for label, v in shown)
        head = f"time {unit}" if step_ms is None else f"step {format_value(step_ms)} {unit}"
        return head, text
    step_text = format_value(step_ms * scale)
    fraction = step_text.partition(".")[2]
    decimals = len(fraction) if fraction.isdigit() else 0
    text = " · ".join(f"{label} {_to_decimals(v * scale, decimals)}" for label, v in shown)
    return f"step {step_text} {unit}", text


def _to_decimals(value: float, decimals: int) -> str:
    """A part of the step to the step's own last digit (``0.3712`` -> ``0.4`` next to 101.8)."""
    if not math.isfinite(value) or abs(value) >= 1e4:
        return format_value(value)
    return f"{value:.{decimals}f}"


def format_window(
    window: WindowStats,
    total_steps: int | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    progress: str = "",
) -> str:
    """The console line for one window.

    ``rank`` starts the line with ``[rank r]`` (when every rank prints); ``world_size`` 1 hides
    ``comm`` (a single process has nothing to communicate); ``progress`` (from
    :class:`ProgressClock`) follows the step.
    """
    metrics = window.metrics
    used: set[str] = set()

    def take(name: str, stat: str = "mean") -> float | None:
        value = _pick(metrics, name, stat)
        if value is not None:
            used.add(name)
        return value

    step = f"step {window.last_step}" + (f"/{total_steps}" if total_steps else "")
    if progress:
        step += f" {progress}"
    parts = [f"[rank {rank}] {step}" if rank is not None else step]
    simple: tuple[tuple[str, str, str, Callable[[float], str]], ...] = (
        ("loss", "train/loss", "mean", format_value),
        ("lr", "train/lr", "last", format_value),
        ("grad_norm", "train/grad_norm", "mean", format_value),
        ("loss_scale", "train/loss_scale", "last", format_value),
    )
    for label, name, stat, fmt in simple:
        value = take(name, stat)
        if value is not None:
            parts.append(f"{label} {fmt(value)}")
    for name, unit in (("perf/samples_per_sec", "samples/s"), ("perf/tokens_per_sec", "tokens/s")):
        value = take(name)  # a rate's window mean is its work over the window's time
        job = take(name.replace("perf/", "perf/job_"), "last")
        if value is not None:
            parts.append(
                f"{format_value(value)} {unit}" + (f" (job {format_value(job)})" if job else "")
            )
    tflops, mfu = take("perf/tflops"), take("perf/mfu")
    if tflops is not None:
        parts.append(
            f"{format_value(tflops)} TFLOPS"
            + (f" (MFU {format_value(100 * mfu)}%)" if mfu is not None else "")
        )
    step_ms = take("perf/step_time_ms")
    if world_size == 1 and _COMM in metrics:
        used.add(_COMM)
    if _ALLREDUCE in metrics:
        used.add(_ALLREDUCE)
    pieces = [
        (label, value)
        for label, name, older in _BREAKDOWN
        if not (world_size == 1 and name == _COMM)
        and ((value := take(name)) is not None or (older and (value := take(older)) is not None))
    ]
    breakdown = _breakdown(step_ms, pieces)
    if breakdown is not None:
        head, text = breakdown
        parts.append(head + (f" ({text})" if text else ""))
    now = take("mem/allocated_mb", "last")
    peak = take("mem/peak_allocated_mb", "max")
    rss, peak_rss = take("mem/rss_mb", "last"), take("mem/peak_rss_mb", "max")
    if now is None:
        now, peak = rss, peak_rss
    if now is not None:
        parts.append(f"mem {_memory(now)}" + (f" (peak {_memory(peak)})" if peak else ""))
    goodput = take(GOODPUT_METRIC, "last")
    if goodput is not None:  # the run so far; the rolling view and the parts: in the files
        parts.append(f"goodput {100 * goodput:.1f}%")
        used.update(n for n in metrics if n.startswith(_GOODPUT_FAMILIES))
    ratio = take("perf/straggler_ratio", "last")
    slowest = take("perf/slowest_rank", "last")
    if ratio is not None and slowest is not None and ratio >= STRAGGLER_SHOWN_AT:
        parts.append(f"slowest rank {int(slowest)} ({format_value(ratio)}x median busy time)")
    for name in _COUNTERS:
        value = take(name, "last")
        if value:
            parts.append(f"{name.split('/')[-1].replace('_', ' ')} {format_value(int(value))}")
    line = " | ".join(parts)
    rest = [
        name for name in metrics if name not in used and not name.endswith(_CROSS_RANK_SUFFIXES)
    ]
    if not rest:
        return line
    first = [n for n in rest if n.startswith(_FIRST_FAMILIES)]
    first.sort(key=lambda n: _FIRST_FAMILIES.index(n[: n.index("/") + 1]))
    ordered = first + [n for n in rest if not n.startswith(_FIRST_FAMILIES)]
    extras: list[str] = []
    length = len(line)
    for shown, name in enumerate(ordered):
        part = f"{printable(name)} {format_value(metrics[name].mean)}"
        more = len(ordered) - shown - 1
        reserve = len(f" | +{more} more") if more else 0
        if length + 3 + len(part) + reserve > MAX_LINE_CHARS:
            extras.append(f"+{len(ordered) - shown} more")
            break
        extras.append(part)
        length += 3 + len(part)
    return " | ".join([line, *extras])


_GOODPUT_FAMILIES = (GOODPUT_METRIC, BADPUT_PREFIX.removesuffix("/"))


def format_duration(seconds: float) -> str:
    """``4.2s`` below 10 s, ``42s``, ``12m``, ``1h05m``, ``2d03h``: short, and as precise as
    an estimate deserves."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    if seconds < 9.95:
        return f"{seconds:.1f}s"
    if seconds < 59.5:
        return f"{seconds:.0f}s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


#: The live progress line is rewritten at most this often (seconds of logged wall time).
LIVE_EVERY_S = 0.2


class ProgressClock:
    """Progress, elapsed time and ETA from the windows' own times (no clock of its own).

    Elapsed counts from the first window's start (the first step logged). The ETA is the
    steps left at the step rate of the last few windows (:data:`RATE_WINDOWS`), so a slower
    phase shows within a few windows, and a steady run's estimate is its true remaining time.
    """

    RATE_WINDOWS = 5

    def __init__(self) -> None:
        self._start: float | None = None
        self._first_step = 0
        self._marks: list[tuple[int, float]] = []

    def describe(self, window: WindowStats, total_steps: int | None) -> str:
        """``(25%) · elapsed 12m · ETA 36m``; "" without a total."""
        if self._start is None:
            self._start = window.start_time
            self._first_step = window.first_step
            self._marks.append((window.first_step, window.start_time))
        self._marks.append((window.last_step, window.end_time))
        del self._marks[: -self.RATE_WINDOWS - 1]
        elapsed = window.end_time - self._start
        if not total_steps:
            return ""
        done = window.last_step
        percent = f"({100 * done / total_steps:.0f}%)"
        parts = [percent, f"elapsed {format_duration(elapsed)}"]
        (old_step, old_time), (new_step, new_time) = self._marks[0], self._marks[-1]
        if done < total_steps and new_step > old_step and new_time > old_time:
            per_step = (new_time - old_time) / (new_step - old_step)
            parts.append(f"ETA {format_duration((total_steps - done) * per_step)}")
        return " · ".join(parts)

    def peek(self, step: int, now: float, total_steps: int | None) -> str:
        """The live line's progress at ``step`` (between windows), from the windows' rate."""
        if self._start is None:
            return ""
        parts = [f"elapsed {format_duration(now - self._start)}"]
        if total_steps:
            parts.insert(0, f"({100 * step / total_steps:.0f}%)")
            (old_step, old_time), (new_step, new_time) = self._marks[0], self._marks[-1]
            if step < total_steps and new_step > old_step and new_time > old_time:
                per_step = (new_time - old_time) / (new_step - old_step)
                eta = (total_steps - step) * per_step
                parts.append(f"ETA {format_duration(eta)}")
        return " · ".join(parts)


class ConsoleWriter(Writer):
    """Prints one line per completed window; per-step records are not printed."""

    kind = "console"

    def __init__(
        self,
        stream: TextIO | None = None,
        total_steps: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._stream = stream
        self.total_steps = total_steps
        self.rank = rank
        """Shown at the start of each line (set when every rank prints); None: not shown."""
        self.world_size = world_size
        """The job's process count; 1 hides ``comm``."""
        self.location = "stdout" if stream is None else getattr(stream, "name", "stream")
        self._clock = ProgressClock()
        self.live = False
        """Keep one progress line rewritten in place between window lines (a terminal only)."""
        self._live_shown = False
        self._live_at = 0.0

    def is_terminal(self) -> bool:
        """Whether the stream is an interactive terminal (not a file, pipe or collector)."""
        stream = self._stream or sys.stdout
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def write(self, records: Sequence[StepScalars]) -> None:
        """Per-step records: only the live line uses them (at most :data:`LIVE_EVERY_S`)."""
        if not self.live or not records:
            return
        record = records[-1]
        if record.wall_time - self._live_at < LIVE_EVERY_S:
            return
        self._live_at = record.wall_time
        total = self.total_steps
        text = f"step {record.step}" + (f"/{total}" if total else "")
        progress = self._clock.peek(record.step, record.wall_time, total)
        stream = self._stream or sys.stdout
        stream.write(f"\r\x1b[K{text}{' ' + progress if progress else ''}")
        stream.flush()
        self._live_shown = True

    def write_extras(self, records: Sequence[Extra]) -> None:
        """A :class:`~trainmon.core.events.Progress` sets the total (histograms are not shown)."""
        for record in records:
            if isinstance(record, Progress):
                self.total_steps = record.total_steps

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        stream = self._stream or sys.stdout
        if self._live_shown:  # the window line replaces the live line
            stream.write("\r\x1b[K")
            self._live_shown = False
        for window in windows:
            progress = self._clock.describe(window, self.total_steps)
            line = format_window(
                window,
                self.total_steps,
                rank=self.rank,
                world_size=self.world_size,
                progress=progress,
            )
            stream.write(line + "\n")
        stream.flush()

    def flush(self) -> None:
        (self._stream or sys.stdout).flush()

    def close(self) -> None:
        if self._live_shown:  # leave the terminal on a fresh line
            (self._stream or sys.stdout).write("\n")
            self._live_shown = False
        self.flush()
