"""The ``trainmon`` command: demo, summary, tail, report, compare, goodput, validate, sync,
hang.

Exit status: 0 on success; 1 when the input cannot be used (no run at a path, a run with no
values, problems found by ``validate``); 2 for a bad command line, an invalid config or a
missing optional package. Errors are one message on stderr, never a traceback (set
``TRAINMON_DEBUG=1`` to see one).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from trainmon.errors import TrainmonError
from trainmon.report.downsample import DEFAULT_BUCKETS
from trainmon.report.model import RunError
from trainmon.version import __version__

EXIT_BAD_INPUT = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and documentation)."""
    from trainmon.cli import commands, goodput, hang, sync, tail, validate

    parser = argparse.ArgumentParser(
        prog="trainmon",
        description="Observable deep-learning training: look at a run in seconds, offline.",
        epilog="RUN is a folder written by trainmon (metrics.jsonl) or a TensorBoard folder "
        "(DeepSpeed's own included), or the file itself.",
    )
    parser.add_argument("--version", action="version", version=f"trainmon {__version__}")
    commands_ = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands_.add_parser(
        "demo", help="train a small model on the CPU with monitoring on, then write its report"
    )
    demo.add_argument("--output", "-o", default="runs/demo", help="output folder (runs/demo)")
    demo.add_argument("--steps", type=int, default=300, help="optimizer steps (300)")
    demo.add_argument("--steps-per-print", type=int, default=50, help="console interval (50)")
    demo.add_argument("--no-report", action="store_true", help="skip <output>/report.html")
    demo.set_defaults(handler=commands.demo)

    summary = commands_.add_parser(
        "summary", help="every metric's last/min/max/mean, step-time breakdown, alerts"
    )
    summary.add_argument("run", metavar="RUN")
    summary.add_argument("--json", action="store_true", help="print the figures as JSON")
    summary.add_argument(
        "--fast",
        action="store_true",
        help="skip the CRC checks of TensorBoard event files (faster; damage may read as data)",
    )
    summary.set_defaults(handler=commands.summary)

    tail_ = commands_.add_parser("tail", help="the window lines and alerts of a run, as they come")
    tail_.add_argument("run", metavar="RUN")
    tail_.add_argument("-f", "--follow", action="store_true", help="keep following (Ctrl-C ends)")
    tail_.add_argument(
        "-n", "--lines", type=int, default=10, help="show the last N lines first (10; 0: all)"
    )
    tail_.add_argument(
        "--interval", type=float, default=0.5, help="seconds between polls with -f (0.5)"
    )
    tail_.set_defaults(handler=tail.tail)

    report = commands_.add_parser(
        "report", help="one self-contained HTML file with interactive charts of one or more runs"
    )
    report.add_argument("runs", metavar="RUN", nargs="+")
    report.add_argument("-o", "--output", default="report.html", help="HTML file (report.html)")
    report.add_argument("--title", help="page title")
    report.add_argument(
        "--name", action="append", default=[], help="label of each RUN, in order (repeatable)"
    )
    report.add_argument(
        "--buckets",
        type=int,
        default=DEFAULT_BUCKETS,
        help=f"points kept per long series: min and max of this many buckets ({DEFAULT_BUCKETS})",
    )
    report.add_argument(
        "--fast",
        action="store_true",
        help="skip the CRC checks of TensorBoard event files (faster; damage may read as data)",
    )
    report.add_argument(
        "--serve",
        action="store_true",
        help="serve the page on a local port instead of writing it, and keep it current as "
        "the runs are written (Ctrl-C stops)",
    )
    report.add_argument(
        "--port", type=int, help="with --serve: the port to listen on (0, the default: a free one)"
    )
    report.add_argument(
        "--host",
        help="with --serve: the address to listen on (127.0.0.1, the default: this machine only)",
    )
    report.set_defaults(handler=commands.report)

    compare = commands_.add_parser("compare", help="key figures of two runs side by side")
    compare.add_argument("a", metavar="A")
    compare.add_argument("b", metavar="B")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON")
    compare.add_argument(
        "--fast",
        action="store_true",
        help="skip the CRC checks of TensorBoard event files (faster; damage may read as data)",
    )
    compare.set_defaults(handler=commands.compare)

    goodput.add_parser(commands_)

    check = commands_.add_parser(
        "validate", help="check a DeepSpeed/trainmon config and print what it will monitor"
    )
    check.add_argument("config", metavar="CONFIG", help="JSON or YAML config file")
    check.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (a top-level key close to a known one) as errors",
    )
    check.set_defaults(handler=validate.validate)
    sync.add_parser(commands_)
    hang.add_parser(commands_)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainmon`` console script and ``python -m trainmon``."""
    args = build_parser().parse_args(argv)
    name = f"trainmon {args.command}"
    try:
        return int(args.handler(args))
    except RunError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TrainmonError as exc:  # MissingExtraError, ConfigError: the message is the help
        print(f"{name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `trainmon summary RUN | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"{name}: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        if os.environ.get("TRAINMON_DEBUG"):
            traceback.print_exc()
        print(
            f"{name}: unexpected error: {type(exc).__name__}: {exc} "
            "(set TRAINMON_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
