"""``trainmon goodput RUN``: where a job's machine time went, across its restarts."""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from trainmon.report.attempts import read_attempts, restarts_of
from trainmon.report.goodput import Goodput, measure
from trainmon.report.model import RunError

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
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result.as_dict(), option=_JSON_OPTIONS))
        sys.stdout.flush()
    else:
        print(render_goodput(result))
    return 0


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
