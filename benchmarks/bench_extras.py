"""Calling-thread cost of ``log_histogram``, ``log_text`` and ``log_hparams`` (CPU here).

What the training thread pays per call: ``log_histogram`` clones the tensor (copies an array)
and queues it; binning happens on the background thread, timed apart here (``binning``, per
histogram, from the queue to the written record). For reference, the same histogram through
``torch.utils.tensorboard.SummaryWriter.add_histogram``, which bins on the calling thread.

Each figure is the median over ``--rounds`` rounds of the mean time per call in a round of
``--calls`` calls; the pipeline is flushed between rounds (not timed), so the queue never
fills. Writers: TensorBoard + JSONL (what a user shows histograms with).

Run: ``.venv/bin/python benchmarks/bench_extras.py [--rounds R] [--calls N]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import harness
import trainmon
from trainmon.core.records import snapshot_histogram


def _per_call_us(
    call: Callable[[int], Any], calls: int, rounds: int, between: Callable[[], Any]
) -> float:
    return statistics.median(harness.per_call_us(call, calls, rounds, between))


def _layer_stats_rows(monitor: trainmon.Monitor, rounds: int) -> list[tuple[str, float]]:
    """optimizer.step() of a 12-block MLP (12.6M parameters, 25 groups) with SGD: bare, with
    watch_layers on a step that measures (a window end), and on one that does not."""
    from torch import nn

    model = nn.Sequential(
        *(nn.Sequential(nn.Linear(512, 1024), nn.Linear(1024, 512)) for _ in range(12)),
        nn.Linear(512, 16),
    )
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)

    def timed(steps: int) -> float:
        return _per_call_us(lambda _: optimizer.step(), steps, rounds, monitor.flush)

    bare = timed(5)
    watcher = monitor.watch_layers(model, optimizer, every=1)
    measured = timed(5)
    watcher.remove()
    watcher = monitor.watch_layers(model, optimizer, every=1_000_000)
    counted = timed(5)
    watcher.remove()
    return [
        ("optimizer.step, 12.6M params, bare", bare),
        ("  + watch_layers, a window-end step (measures)", measured),
        ("  + watch_layers, any other step", counted),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="bench-extras-"))
    config = {
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(base), "job_name": "tm"},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "tm"},
    }
    monitor = trainmon.Monitor(config)
    flush = monitor.flush
    rows: list[tuple[str, float]] = []

    def histogram(name: str, values: Any) -> Callable[[int], Any]:
        return lambda i: monitor.log_histogram(name, values, step=i)

    def reference(writer: Any, values: Any) -> Callable[[int], Any]:
        return lambda i: writer.add_histogram("w", values, i, bins="tensorflow")

    for numel in (1_000, 100_000, 1_000_000):
        tensor = torch.randn(numel)
        calls = max(10, args.calls // max(1, numel // 100_000))
        us = _per_call_us(histogram("w", tensor), calls, args.rounds, flush)
        rows.append((f"log_histogram, float32 tensor of {numel:,}", us))
        array = tensor.numpy()
        us = _per_call_us(histogram("a", array), calls, args.rounds, flush)
        rows.append((f"log_histogram, numpy float32 array of {numel:,}", us))
        pending = [snapshot_histogram("w", tensor, 0, 0.0, 30) for _ in range(calls)]
        start = time.perf_counter_ns()
        for item in pending:
            item.build()
        rows.append(
            (
                f"  binning in the background, {numel:,} values",
                (time.perf_counter_ns() - start) / calls / 1000,
            )
        )
        try:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(base / f"sw-{numel}"))
            us = _per_call_us(
                reference(writer, tensor),
                max(5, calls // 4),
                args.rounds,
                writer.flush,
            )
            writer.close()
            rows.append((f"  reference: SummaryWriter.add_histogram, {numel:,}", us))
        except ImportError:
            pass
    text = "a generated sample " * 20
    rows.append(
        (
            "log_text, 380 characters",
            _per_call_us(
                lambda i: monitor.log_text("s", text, step=i), args.calls, args.rounds, flush
            ),
        )
    )
    hparams = {f"group{i // 5}": {f"key{i}": i * 0.5 if i % 2 else f"v{i}"} for i in range(20)}
    rows.append(
        (
            "log_hparams, 20 keys (nested)",
            _per_call_us(lambda i: monitor.log_hparams(hparams), args.calls, args.rounds, flush),
        )
    )
    rows += _layer_stats_rows(monitor, args.rounds)
    monitor.close()
    harness.print_columns(
        [("call", -52), ("µs per call", 12)], [(label, f"{us:.1f}") for label, us in rows]
    )


if __name__ == "__main__":
    main()
