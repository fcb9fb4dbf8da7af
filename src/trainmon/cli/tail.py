"""``trainmon tail RUN [-f]``: the console's window lines and the alerts, as a run writes them.

Window lines are rebuilt from the journal's ``window`` records and formatted by the console
writer's own :func:`~trainmon.writers.console.format_window`, so they read exactly like the
training process's output. A run resumed into the same folder gets a line at the restart
(``── restart: resumed from step 20 · steps 21–30 of the previous attempt replaced``). With
``-f`` the journal and ``alerts.jsonl`` are polled: a line is printed once it is complete, a
file that shrinks or is replaced is read again from its start, and Ctrl-C ends with status 0.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.alert import ALERTS_FILE
from trainmon.journal import JOURNAL_FILE, decode_value
from trainmon.report.attempts import Restart
from trainmon.report.loading import find_journal, parse_alert_lines
from trainmon.report.model import RunError
from trainmon.report.text import alert_line
from trainmon.writers.console import format_window


class FileFollower:
    """New complete lines of a file that may grow, be truncated, replaced, or not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.identity: tuple[int, int] | None = None

    def read_lines(self) -> list[bytes]:
        """The lines completed since the last call (a trailing unfinished line is kept back)."""
        try:
            info = os.stat(self.path)
        except OSError:
            return []
        identity = (info.st_dev, info.st_ino)
        if identity != self.identity or info.st_size < self.offset:
            self.identity, self.offset, self.partial = identity, 0, b""
        if info.st_size == self.offset:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return lines

    def read_last(self, enough: Callable[[list[bytes]], bool], block: int = 1 << 16) -> list[bytes]:
        """Complete lines read backwards from the end, a block at a time, until
        ``enough(lines)`` or the start of the file; :meth:`read_lines` then goes on from the
        end. A long journal costs a few blocks, not a read of the whole file."""
        try:
            with open(self.path, "rb") as f:
                info = os.fstat(f.fileno())
                size = info.st_size
                pos, data = size, b""
                while pos > 0:
                    step = min(block, pos)
                    pos -= step
                    f.seek(pos)
                    data = f.read(step) + data
                    lines = data.split(b"\n")
                    complete = lines[1:-1] if pos > 0 else lines[:-1]
                    if enough(complete):
                        break
                    block = min(block * 2, 1 << 24)
        except OSError:
            return []
        lines = data.split(b"\n")
        self.identity, self.offset = (info.st_dev, info.st_ino), size
        self.partial = lines[-1]
        return lines[1:-1] if pos > 0 else lines[:-1]

    def read_first(self, block: int = 1 << 16) -> list[bytes]:
        """The complete lines of the file's first ``block`` bytes."""
        try:
            with open(self.path, "rb") as f:
                return f.read(block).split(b"\n")[:-1]
        except OSError:
            return []


def window_from_record(record: dict[str, Any]) -> WindowStats | None:
    """The :class:`WindowStats` a journal ``window`` record was written from (None if malformed)."""
    stats = record.get("stats")
    if not isinstance(stats, dict):
        return None
    metrics = {}
    for name, s in stats.items():
        if not isinstance(s, dict):
            continue
        values = [_number(s.get(k)) for k in ("mean", "min", "max", "last")]
        count = s.get("count")
        metrics[name] = MetricStats(
            count if isinstance(count, int) else 0, values[0], values[1], values[2], values[3]
        )
    first, last = record.get("first_step"), record.get("last_step")
    if not isinstance(last, int):
        return None
    return WindowStats(
        first if isinstance(first, int) else last,
        last,
        _number(record.get("start_time")),
        _number(record.get("end_time")),
        metrics,
    )


def _number(value: Any) -> float:
    value = decode_value(value)
    return float(value) if isinstance(value, (int, float)) else math.nan


_STEP = re.compile(rb'"step":(\d+)')
_TIME = re.compile(rb'"time":(-?[\d.eE+-]+)')
_SHOWN_KINDS = (b'"window"', b'"meta"', b'"resume"', b'"end"')


def _window_lines(lines: list[bytes], run: dict[str, Any]) -> list[tuple[float, str]]:
    """Window lines as the console printed them, and a line at each restart; ``run`` keeps
    the last meta's world size and what the restart line needs (the steps seen so far).

    A restart (a resume, or a new attempt's first step at or before steps already seen)
    removes the windows these lines gave that it replaced: what is printed at once is the
    surviving timeline, as in ``summary``."""
    out: list[tuple[float, str, int | None]] = []
    for line in lines:
        if not any(kind in line for kind in _SHOWN_KINDS):
            if b'"scalars"' in line:  # not shown; only its step is noted (cheaply)
                found = _STEP.search(line)
                if found:
                    step = int(found.group(1))
                    if run.pop("starting", False):  # a new attempt's first step
                        out = _restarted(out, run, step, None, _line_time(line))
                    run.setdefault("steps", {})[step] = run.get("attempt", 1)
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("kind") == "meta":
            size = record.get("world_size")
            run["world_size"] = size if isinstance(size, int) else None
            if "attempt" in run or run.get("steps"):  # a restart into the same folder
                run["previous_ended"] = run.get("ended", "killed")
                run["attempt"] = run.get("attempt", 1) + 1
                run["starting"] = True
            else:
                run["attempt"] = 1
            run["ended"] = "killed"  # until its end record says otherwise
        elif record.get("kind") == "end":
            run["ended"] = "closed" if record.get("status") == "success" else "ended"
        elif record.get("kind") == "resume" and isinstance(record.get("step"), int):
            run.pop("starting", None)
            first = record["step"]
            out = _restarted(out, run, first, first - 1, _number(record.get("time")))
        elif record.get("kind") == "window":
            window = window_from_record(record)
            if window is not None:
                text = format_window(window, world_size=run.get("world_size"))
                out.append((window.end_time, text, window.last_step))
    return [(when, text) for when, text, _ in out]


def _line_time(line: bytes) -> float:
    found = _TIME.search(line)
    return float(found.group(1)) if found else math.inf


def _restarted(
    out: list[tuple[float, str, int | None]],
    run: dict[str, Any],
    first: int,
    resumed_from: int | None,
    when: float,
) -> list[tuple[float, str, int | None]]:
    """``out`` without the windows the restart at step ``first`` replaced, then the line
    ``── restart: resumed from step 20 · steps 21–30 of the previous attempt replaced``
    (or ``restarted from scratch``) when an earlier attempt had steps from ``first`` on."""
    attempt = run.get("attempt", 1)
    steps = run.get("steps", {})
    replaced = [s for s, a in steps.items() if s >= first and a != attempt]
    for s in replaced:
        del steps[s]
    if resumed_from is None and not replaced:
        return out  # a new attempt that carries on after the last one: nothing to say
    span = (min(replaced), max(replaced)) if replaced else None
    restart = Restart(attempt, when, resumed_from, span)
    why = run.get("previous_ended")
    after = f" (the previous attempt was {why})" if why else ""
    kept = [entry for entry in out if entry[2] is None or entry[2] < first]
    return [*kept, (restart.time, f"── restart: {restart.describe()}{after}", None)]


def _alert_lines(lines: list[bytes]) -> list[tuple[float, str]]:
    out = []
    for alert in parse_alert_lines(lines):
        when = alert.get("time")
        out.append(
            (
                float(when) if isinstance(when, (int, float)) else math.inf,
                "ALERT " + alert_line(alert),
            )
        )
    return out


def _has(marker: bytes, count: int) -> Callable[[list[bytes]], bool]:
    """Whether lines hold ``count`` non-blank lines containing ``marker``."""

    def enough(lines: list[bytes]) -> bool:
        return sum(1 for line in lines if marker in line and line.strip()) >= count

    return enough


def _journal_for(run: Path, follow: bool) -> Path:
    if not run.exists() and follow and (run.suffix == ".jsonl" or run.parent.is_dir()):
        return run if run.suffix == ".jsonl" else run / JOURNAL_FILE
    journal, _ = find_journal(run)
    if journal is not None:
        return journal
    if run.is_dir() and follow and not any(".tfevents." in p.name for p in run.rglob("*")):
        return run / JOURNAL_FILE  # the run has not written its journal yet: wait for it
    raise RunError(
        f"{run}: no trainmon journal ({JOURNAL_FILE}) here; tail follows trainmon's journal "
        "(enable the config's jsonl section). For TensorBoard folders use `trainmon summary` "
        "or `trainmon report`."
    )


def tail(args: argparse.Namespace) -> int:
    """Print the last window lines and alerts; with ``--follow``, keep printing new ones."""
    if args.lines < 0:
        raise RunError(f"-n {args.lines}: expected 0 (all) or more")
    if args.interval <= 0:
        raise RunError(f"--interval {args.interval}: expected a number of seconds > 0")
    run_path = Path(args.run)
    waiting = args.follow and not run_path.exists()
    if waiting:  # following a run that is about to start: wait for its folder, say so once
        print(f"waiting for {run_path} to appear ...", file=sys.stderr, flush=True)
        try:
            while not run_path.exists():
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0
    journal = _journal_for(run_path, args.follow)
    journal_lines = FileFollower(journal)
    alert_lines = FileFollower(journal.parent / ALERTS_FILE)
    out = sys.stdout
    if args.follow and not journal.exists() and not waiting:
        print(f"waiting for {journal} ...", file=sys.stderr, flush=True)
    run: dict[str, Any] = {}
    if args.lines:
        journal_tail = journal_lines.read_last(_has(b'"window"', args.lines))
        if not any(b'"meta"' in line for line in journal_tail):
            _window_lines(journal_lines.read_first(), run)  # the world size of the run's start
        events = _window_lines(journal_tail, run)
        events += _alert_lines(alert_lines.read_last(_has(b"", args.lines)))
    else:
        events = _window_lines(journal_lines.read_lines(), run)
        events += _alert_lines(alert_lines.read_lines())
    events.sort(key=lambda event: event[0])
    shown = events[-args.lines :] if args.lines else events
    for _, text in shown:
        out.write(text + "\n")
    out.flush()
    if not args.follow:
        if not events:
            print(
                f"{journal}: no window closed yet (one closes every steps_per_print steps)",
                file=sys.stderr,
            )
        return 0
    try:
        while True:
            time.sleep(args.interval)
            fresh = _window_lines(journal_lines.read_lines(), run) + _alert_lines(
                alert_lines.read_lines()
            )
            for _, text in sorted(fresh, key=lambda event: event[0]):
                out.write(text + "\n")
            if fresh:
                out.flush()
    except KeyboardInterrupt:
        return 0
