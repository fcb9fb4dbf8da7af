"""``trainmon goodput RUN``: where a job's machine time went, across its restarts."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any

import orjson

from trainmon.report.attempts import read_attempts, restarts_of
from trainmon.report.goodput import Goodput, measure
from trainmon.report.model import RunError
from trainmon.report.timeline import job_timeline, render_text

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def goodput(args: argparse.Namespace) -> int:
    """Print the goodput table of one job folder (or its JSON with ``--json``)."""
    notes: list[str] = []
    attempts = read_attempts(args.run, notes)
    for note in notes:
        print(f"  note: {note}", file=sys.stderr)
    if not attempts:
        raise RunError(f"{args.run}: the journal holds no attempt (no meta line)")
    result = measure(attempts)
    # (getattr: a parser that defines no --timeline, not built by :func:`add_parser`)
    timeline = job_timeline(result.attempts) if getattr(args, "timeline", False) else None
    if args.json:
        figures = result.as_dict()
        if timeline is not None:
            figures["timeline"] = timeline.as_json()
        sys.stdout.buffer.write(orjson.dumps(figures, option=_JSON_OPTIONS))
        sys.stdout.flush()
    else:
        print(render_goodput(result))
        if timeline is not None:
            width = shutil.get_terminal_size((80, 24)).columns
            pad = len(f"#{len(result.attempts)}") + 4  # the rows' labels
            colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
            print("\ntimeline (wall time from the first attempt's start):")
            print("\n".join(render_text(timeline, max(20, width - pad - 1), colour)))
    return 0


def add_parser(commands: Any) -> None:
    """``trainmon goodput RUN [--json] [--timeline]``."""
    parser = commands.add_parser(
        "goodput",
        help="how much of a job's wall time, across its restarts, went into kept steps",
    )
    parser.add_argument("run", metavar="RUN", help="a job folder (metrics.jsonl) or the file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="draw each attempt along wall time, coloured by category (with --json: add "
        'each attempt\'s segments as "timeline")',
    )
    parser.set_defaults(handler=goodput)


def render_goodput(result: Goodput) -> str:
    """A short table of productive time and badput by cause, then one line per attempt."""
    wall = result.wall_s
    share = result.goodput
    restarts = result.restarts
    lines = [
        f"wall {_seconds(wall)} over {len(result.attempts)} attempt(s) "
        f"({restarts} restart{'s' if restarts != 1 else ''}), goodput "
        f"{'-' if share is None else f'{share:.1%}'}",
        "",
    ]
    for key, seconds in [("productive", result.productive_s), *result.badput.items()]:
        lines.append(f"  {key:<18} {_seconds(seconds):>10}  {_share(seconds, wall)}")
    redone = result.redone_steps
    if redone:
        lines.append(
            f"\n{redone} step(s) redone, {_seconds(result.badput['lost_work_s'])} of work lost"
        )
    lines.append("\nattempts:")
    restarts_at = {r.index: r for r in restarts_of(result.attempts)}
    for attempt in result.attempts:
        steps = [s.step for s in attempt.steps]
        span = f"steps {min(steps)}–{max(steps)}" if steps else "no steps"
        ended = attempt.ended
        if attempt.stop_reason:
            ended += f" ({attempt.stop_reason})"
        if ended == "killed":
            ended += f" (last sign of life {_clock(attempt.last_seen)})"
        line = f"  #{attempt.index}  {_clock(attempt.start)}  {span:<16} {ended}"
        restart = restarts_at.get(attempt.index)
        if restart is not None:
            line += f"  · {restart.describe()}"
        lines.append(line)
    return "\n".join(lines)


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.2f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.2f} s"


def _share(value: float, wall: float) -> str:
    return f"{value / wall:6.1%}" if wall > 0 else "     -"


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
