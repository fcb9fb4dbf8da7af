"""0-d tensors through ``Monitor.write_events``: is their data read on the calling thread?

Why: the training thread must never wait for the device, so logging a tensor may not call
``item``/``tolist``/``cpu``/``__float__`` there. 0-d tensors of a ``torch.Tensor`` subclass whose
``__torch_function__`` records the thread of every call, with those four methods wrapped to
record theirs, are logged with TensorBoard + JSONL in a fresh process; the calls are counted
per thread, and the journal's last step is read back to show the values still arrive.

Run: ``.venv/bin/python benchmarks/bench_write_tensors.py [--steps 2500] [--json out.json]``
(``--quick``: 200 steps). ``bench_write_path.py`` runs it too (unless ``--no-extras``), next
to its uninstrumented "0-d tensors" row.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import harness
from write_path.report import Row
from write_path.workload import INFO_MODULES, NAMES, PER_STEP, trainmon_config

SYNC_METHODS = ("item", "tolist", "cpu", "__float__")


def work_tensor_check(steps: int, folder: Path) -> dict[str, Any]:
    """Log 0-d tensors and count, per thread, every call that could read their data."""
    import torch

    import trainmon
    from trainmon.journal import read_journal

    lock = threading.Lock()
    patched: dict[tuple[str, int], int] = {}
    torch_functions: dict[tuple[str, int], int] = {}

    def record(table: dict[tuple[str, int], int], name: str) -> None:
        key = (name, threading.get_ident())
        with lock:
            table[key] = table.get(key, 0) + 1

    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            record(patched, name)
            return original(self, *args, **kwargs)

        return wrapper

    class Probe(torch.Tensor):
        """Sees every torch function and Tensor method applied to it, on any thread."""

        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
        ) -> Any:
            record(torch_functions, getattr(func, "__name__", repr(func)))
            return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]

    rows = [
        tuple(torch.tensor(float(i * PER_STEP + j)).as_subclass(Probe) for j in range(PER_STEP))
        for i in range(16)
    ]
    caller = threading.get_ident()
    for name, original in originals.items():
        setattr(torch.Tensor, name, wrap(name, original))
    try:
        config = trainmon_config(folder, ("tensorboard", "jsonl"), 200_000)
        monitor = trainmon.Monitor(config)
        t0 = time.thread_time_ns()
        for s in range(steps):
            monitor.step = s
            monitor.write_events(list(zip(NAMES, rows[s % len(rows)], strict=True)))
        calling_ns = time.thread_time_ns() - t0
        monitor.close()
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)

    def split(table: dict[tuple[str, int], int]) -> tuple[dict[str, int], dict[str, int]]:
        mine: dict[str, int] = {}
        others: dict[str, int] = {}
        for (name, ident), count in table.items():
            side = mine if ident == caller else others
            side[name] = side.get(name, 0) + count
        return mine, others

    patched_caller, patched_background = split(patched)
    tf_caller, tf_background = split(torch_functions)
    sync_on_caller = sum(patched_caller.get(n, 0) for n in SYNC_METHODS) + sum(
        tf_caller.get(n, 0) for n in SYNC_METHODS
    )
    # the values must still arrive: the journal's last step holds the last row, as floats
    last = [r for r in read_journal(folder / "bench") if r.get("kind") == "scalars"][-1]
    expected = {n: float(v) for n, v in zip(NAMES, rows[(steps - 1) % len(rows)], strict=True)}
    return {
        "steps": steps,
        "tensor_scalars": steps * PER_STEP,
        "sync_calls_on_calling_thread": sync_on_caller,
        "patched_methods_calling_thread": patched_caller,
        "patched_methods_background": patched_background,
        "torch_function_calls_calling_thread": tf_caller,
        "torch_function_calls_background": tf_background,
        "instrumented_calling_us_per_scalar": calling_ns / 1e3 / (steps * PER_STEP),
        "values_written_correctly": last["step"] == steps - 1 and last["values"] == expected,
        "dropped": monitor.dropped_events,
    }


def run(steps: int, folder: Path) -> dict[str, Any]:
    """The check in a fresh interpreter (the patches and the probe stay in there)."""
    return harness.run_worker(
        __file__, ["--worker", "--steps", str(steps), "--folder", str(folder)]
    )


def print_result(tensor: dict[str, Any], tensor_row: Row | None = None) -> None:
    """What was called on which thread; ``tensor_row``: the same logging, uninstrumented."""
    print("\n## 0-d tensors through write_events: data reads on the calling thread")
    if "error" in tensor:
        print("  failed:", tensor["error"])
        return
    print(f"  {tensor['tensor_scalars']:,} tensor scalars logged (instrumented run)")
    print(
        f"  item/tolist/cpu/__float__ calls on the calling thread: "
        f"{tensor['sync_calls_on_calling_thread']} (expected 0)"
    )
    print(f"  patched methods, calling thread: {tensor['patched_methods_calling_thread']}")
    print(f"  patched methods, background:     {tensor['patched_methods_background']}")
    print(f"  torch functions, calling thread: {tensor['torch_function_calls_calling_thread']}")
    print(f"  torch functions, background:     {tensor['torch_function_calls_background']}")
    print(
        f"  values in the journal equal the tensors: "
        f"{tensor['values_written_correctly']}; dropped: {tensor['dropped']}"
    )
    if tensor_row is not None and not tensor_row.unavailable:
        print(
            f"  uninstrumented (table row '{tensor_row.label}'): calling thread "
            f"{tensor_row.call_us:.3f} µs CPU per tensor scalar, background "
            f"{tensor_row.background_us:.3f} µs"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=2500, help="steps of 8 tensors (2500)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 steps")
    parser.add_argument("--json", default="", help="also write the result to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 200
    if args.worker:
        try:
            result = work_tensor_check(args.steps, Path(args.folder or tempfile.mkdtemp()))
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        harness.emit_result(result)
        return 0
    info = harness.machine_info(INFO_MODULES)
    print(harness.machine_line(info))
    with tempfile.TemporaryDirectory(prefix="bench_write_tensors_") as tmp:
        result = run(args.steps, Path(tmp))
    print_result(result)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "tensor_check": result}, indent=2))
        print(f"\nwrote {args.json}")
    return 1 if "error" in result or result["sync_calls_on_calling_thread"] else 0


if __name__ == "__main__":
    sys.exit(main())
