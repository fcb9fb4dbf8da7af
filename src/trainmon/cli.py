"""The ``trainmon`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainmon.errors import TrainmonError
from trainmon.version import __version__


def _demo(args: argparse.Namespace) -> int:
    from trainmon.demo import run_demo

    print(f"trainmon demo: training a small MLP for {args.steps} steps on the CPU ...", flush=True)
    outputs = run_demo(Path(args.output), steps=args.steps, steps_per_print=args.steps_per_print)
    print("\ndone. Outputs:")
    for kind, path in outputs.items():
        print(f"  {kind:<12} {path}")
    print(f"\nView in TensorBoard:\n  tensorboard --logdir {outputs['tensorboard']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and documentation)."""
    parser = argparse.ArgumentParser(
        prog="trainmon", description="Observable deep-learning training."
    )
    parser.add_argument("--version", action="version", version=f"trainmon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a small model on the CPU with monitoring on")
    demo.add_argument("--output", "-o", default="runs/demo", help="output folder (runs/demo)")
    demo.add_argument("--steps", type=int, default=300, help="optimizer steps (300)")
    demo.add_argument("--steps-per-print", type=int, default=50, help="console interval (50)")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainmon`` console script and ``python -m trainmon``."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except TrainmonError as exc:  # MissingExtraError, ConfigError: the message is the help
        print(f"trainmon: {exc}", file=sys.stderr)
        return 2
