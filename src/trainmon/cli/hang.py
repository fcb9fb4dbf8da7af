"""``trainmon hang RUN``: which rank is behind, and where, from the ranks' hang records.

Reads the ``hang-rank<r>.json`` files the stall watchdogs wrote (see
:mod:`trainmon.alerts.hang`); needs nothing from the job, so it works while the job is still
hung and after it was killed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from trainmon.alerts.hang import HANG_FILE_GLOB, describe_rank, diagnose, read_records
from trainmon.report.model import RunError


def hang(args: argparse.Namespace) -> int:
    """Print the merged verdict, then a few lines per rank; 1 when there is no record."""
    run = Path(args.run)
    if run.is_file():
        run = run.parent
    if not run.is_dir():
        raise RunError(f"{run}: no such folder")
    records = read_records(run)
    if not records:
        raise RunError(
            f"{run}: no hang record ({HANG_FILE_GLOB}); the stall watchdog writes one per rank "
            'when a "stall" alert rule fires, e.g. {"kind": "stall", "seconds": 600}'
        )
    world_size = args.world_size
    verdict = diagnose(records, world_size)
    if args.json:
        out = {**verdict.as_dict(), "ranks": {str(rank): records[rank] for rank in records}}
        sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
        return 0
    print(verdict.line)
    for rank in sorted(records):
        print()
        print("\n".join(describe_rank(records[rank])))
    return 0


def add_parser(commands: Any) -> None:
    """``trainmon hang RUN [--json] [--world-size N]``."""
    parser = commands.add_parser(
        "hang", help="which rank of a stalled job is behind, and where (from the hang records)"
    )
    parser.add_argument("run", metavar="RUN", help="the run folder (the ranks' shared folder)")
    parser.add_argument("--json", action="store_true", help="print the verdict and records as JSON")
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="ranks in the job (default: as the records say); ranks without a record are named",
    )
    parser.set_defaults(handler=hang)
