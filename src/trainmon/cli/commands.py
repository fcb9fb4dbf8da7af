"""``trainmon demo``, ``summary``, ``report`` and ``compare``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from trainmon.errors import TrainmonError
from trainmon.report.extras import hparam_rows
from trainmon.report.guard import refuse_output_in_record
from trainmon.report.html import too_many_runs, write_report
from trainmon.report.loading import load_run
from trainmon.report.model import Run, RunError
from trainmon.report.summary import compare as compare_runs
from trainmon.report.summary import summarize
from trainmon.report.text import render_compare, render_hparam_differences, render_summary

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY


def _load(path: str, name: str | None = None, *, fast: bool = False, clock: bool = True) -> Run:
    """``clock=False``: no time per step (the report's wall-time axis; tables need none)."""
    run = load_run(path, name, verify=not fast, clock=clock)
    run.require_metrics()
    return run


def _print_json(obj: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=_JSON_OPTIONS))
    sys.stdout.flush()


def demo(args: argparse.Namespace) -> int:
    """Train the demo model, then write and name its report."""
    from trainmon.cli.demo import run_demo

    print(f"trainmon demo: training a small MLP for {args.steps} steps on the CPU ...", flush=True)
    output = Path(args.output)
    outputs = run_demo(output, steps=args.steps, steps_per_print=args.steps_per_print)
    print("\ndone. Outputs:")
    for kind, path in outputs.items():
        print(f"  {kind:<12} {path}")
    print(f"\nView in TensorBoard:\n  tensorboard --logdir {outputs['tensorboard']}")
    if not args.no_report:
        report = write_report([_load(str(outputs["jsonl"]))], output / "report.html")
        print(f"\nReport (open it in a browser, no network needed):\n  {report.resolve()}")
    return 0


def summary(args: argparse.Namespace) -> int:
    """Print the summary table of one run."""
    run = _load(args.run, fast=args.fast, clock=False)
    if args.json:
        sys.stdout.buffer.write(summary_json([run]))
        sys.stdout.flush()
    else:
        print(render_summary(summarize(run)))
    return 0


def summary_json(runs: Sequence[Run]) -> bytes:
    """What ``trainmon summary RUN --json`` prints: a run's figures, a list for several runs
    (``report --serve`` answers ``/summary.json`` with it)."""
    figures = [summarize(run).as_dict() for run in runs]
    return orjson.dumps(figures[0] if len(figures) == 1 else figures, option=_JSON_OPTIONS)


def report(args: argparse.Namespace) -> int:
    """Write the HTML report of one or more runs."""
    if args.buckets < 10:
        raise RunError(f"--buckets {args.buckets}: expected at least 10")
    if len(args.name) > len(args.runs):
        raise RunError(f"{len(args.name)} --name given for {len(args.runs)} run(s)")
    names = args.name + [None] * (len(args.runs) - len(args.name))
    if args.serve:
        return _serve(args, names)
    if args.port is not None or args.host is not None:
        raise TrainmonError("--port and --host go with --serve")
    refuse_output_in_record(args.output, args.runs, "-o/--output")
    runs = [_load(path, name, fast=args.fast) for path, name in zip(args.runs, names, strict=True)]
    _unique_names(runs)
    path = write_report(runs, args.output, buckets=args.buckets, title=args.title)
    size = path.stat().st_size
    values = sum(run.scalar_count for run in runs)
    through = Path(args.output)
    via = f", through the symlink {through}" if through.is_symlink() else ""
    print(f"wrote {path} ({size / 1e6:.1f} MB, {len(runs)} run(s), {values:,} values{via})")
    for run in runs:
        for note in run.notes:
            print(f"  note ({run.name}): {note}", file=sys.stderr)
    crowded = too_many_runs(len(runs))
    if crowded:
        print(f"trainmon report: warning: {crowded}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace, names: list[str | None]) -> int:
    """``report --serve``: the page on a local port, kept current (see report/serve.py)."""
    from trainmon.report.live import LiveRuns
    from trainmon.report.serve import serve

    port = 0 if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise TrainmonError(f"--port {port}: expected 0 (a free port) to 65535")
    runs = LiveRuns(
        args.runs, names, buckets=args.buckets, verify=not args.fast, label=_unique_names
    )
    for run in runs.runs:
        for note in run.notes:
            print(f"  note ({run.name}): {note}", file=sys.stderr)
    crowded = too_many_runs(len(runs.runs))
    if crowded:
        print(f"trainmon report: warning: {crowded}", file=sys.stderr)
    return serve(
        runs,
        summary_json=summary_json,
        host=args.host or "127.0.0.1",
        port=port,
        title=args.title,
    )


def compare(args: argparse.Namespace) -> int:
    """Print two runs' key figures side by side with the relative change."""
    runs = [_load(path, fast=args.fast, clock=False) for path in (args.a, args.b)]
    _unique_names(runs)
    a, b = (summarize(run) for run in runs)
    rows = compare_runs(a, b)
    hparams = [
        {"key": key, "a": values[0], "b": values[1]}
        for key, values, differs in hparam_rows(runs)
        if differs
    ]
    if args.json:
        _print_json(
            {
                "a": {"run": a.run, "path": a.path},
                "b": {"run": b.run, "path": b.path},
                "rows": [
                    {
                        "label": r.label.strip(),
                        "unit": r.unit,
                        "a": r.values[0],
                        "b": r.values[1],
                        "change": r.change,
                    }
                    for r in rows
                ],
                "hparams": hparams,
            }
        )
    else:
        print(render_compare(a, b, rows))
        if hparams:
            print(render_hparam_differences(hparams))
    return 0


def _unique_names(runs: list[Run]) -> None:
    """Label runs that share a name by their folder too (``job (runs/a)``)."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for index, run in enumerate(runs):
        if seen[run.name] > 1:
            folder = run.path.parent if run.path.is_file() else run.path
            run.name = f"{run.name} #{index + 1} ({folder})"
