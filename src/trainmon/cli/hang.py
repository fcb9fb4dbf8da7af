"""``trainmon hang RUN``: which rank is behind, and where, from the ranks' hang records.

Reads the ``hang-rank<r>.json`` files the stall watchdogs wrote (see
:mod:`trainmon.alerts.hang`); needs nothing from the job, so it works while the job is still
hung and after it was killed. A record outlives its stall, so the records are first checked
against the run's journal and alert file: when a later attempt started, the stall was
resolved or the run ended after them, the first line says so, and when, before the verdict
of that past stall. A rank that is gone (its node or agent stopped: its record's ``last_seen``
fell behind the others', or its process on this host ended while another rank's runs) is named
as gone rather than as waiting or behind. Exit 0 whenever a record could be read, current or
not; 1 when there is none (or every one is damaged).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from trainmon.alerts.hang import (
    HANG_FILE_GLOB,
    HangVerdict,
    dead_processes,
    describe_rank,
    diagnose,
    scan_records,
)
from trainmon.report.hang_currency import Currency, judge, when
from trainmon.report.model import RunError


def _headline(currency: Currency, checked: bool, now: float) -> str:
    """The line that says whether the verdict is about now."""
    written = when(currency.recorded_at, now)
    if not currency.current:
        return f"not hung now: {currency.stale_reason}"
    if not checked:
        return (
            f"taken as current: the records were written at {written}, and no journal "
            "(metrics.jsonl) or alert file (alerts.jsonl) beside them says what came after"
        )
    return (
        f"hung now: the records were written at {written}, and no later attempt, resolution "
        "of the stall or end of the run came after them"
    )


def hang(args: argparse.Namespace) -> int:
    """Print the verdict and whether it is current, then a few lines per rank; 1 when there is
    no readable record."""
    run = Path(args.run)
    if run.is_file():
        run = run.parent
    if not run.is_dir():
        raise RunError(f"{run}: no such folder")
    scan = scan_records(run)
    if not scan.records and scan.damaged:
        raise RunError(f"{run}: every hang record is damaged, none to judge; {scan.damaged_line()}")
    if not scan.records:
        raise RunError(
            f"{run}: no hang record ({HANG_FILE_GLOB}); the stall watchdog writes one per rank "
            'when a "stall" alert rule fires, e.g. {"kind": "stall", "seconds": 600}'
        )
    records = scan.records
    now = time.time()
    currency = judge(run, records, now)
    judged = {r: records[r] for r in records if r not in currency.left_out} or records
    verdict = diagnose(judged, args.world_size, dead=dead_processes(judged, now))
    headline = _headline(currency, bool(currency.checked), now)
    if args.json:
        out = {
            **verdict.as_dict(),
            **currency.as_dict(),
            "headline": headline,
            "damaged": [{"file": name, "reason": why} for name, why in scan.damaged],
            "ranks": {str(rank): records[rank] for rank in records},
        }
        sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
        return 0
    if currency.current:
        print(verdict.line)
        print(headline)
    else:
        print(headline)
        print(
            f"the records, written at {when(currency.recorded_at, now)}, show a past stall: "
            f"{verdict.line}"
        )
    for rank, why in sorted(currency.left_out.items()):
        print(f"left out: rank {rank}'s record ({why})")
    if scan.damaged:
        print(scan.damaged_line())
    shown = sorted(records) if args.all else _worth_showing(records, verdict)
    for rank in shown:
        print()
        print("\n".join(describe_rank(records[rank], now)))
    if len(shown) < len(records):
        print(
            f"\n({len(records) - len(shown):,} more ranks wait where the verdict says: "
            "--all shows every rank, --json gives every record)"
        )
    return 0


def _worth_showing(records: Mapping[int, Any], verdict: HangVerdict) -> list[int]:
    """The ranks behind or gone, and the first rank of each group waiting in a collective: at
    1,024 ranks the output stays a screen or two; the rest are counted."""
    shown = set(verdict.behind) | set(verdict.gone)
    shown.update(ranks[0] for ranks in verdict.waiting.values() if ranks)
    return sorted(rank for rank in shown if rank in records)


def add_parser(commands: Any) -> None:
    """``trainmon hang RUN [--json] [--world-size N]``."""
    parser = commands.add_parser(
        "hang", help="which rank of a stalled job is behind, and where (from the hang records)"
    )
    parser.add_argument("run", metavar="RUN", help="the run folder (the ranks' shared folder)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the verdict, whether it is current (current, stale_reason) and the records "
        "as JSON",
    )
    parser.add_argument(
        "--all", action="store_true", help="a block for every rank (default: those behind)"
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="ranks in the job (default: as the records say); ranks without a record are named",
    )
    parser.set_defaults(handler=hang)
