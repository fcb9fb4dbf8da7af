"""The DeepSpeed benchmarks' figures: each contender's blocks, and the paired comparisons.

Both scripts report alike: per block the wall time (steps and the flush that drains the
background), the steps alone, the training thread's CPU, the process's CPU, and two
differences of clocks of one process (``off-CPU``, ``background CPU``); comparisons are paired
per round against the contender's baseline, with a two-level bootstrap interval (groups of
rounds that shared one set of processes, then rounds).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
from deepspeed_bench.contenders import BOOTSTRAP_RESAMPLES, BY_NAME, EXTRA_COMPARISONS


@dataclass
class Series:
    """A contender's blocks: per-block figures (ms per step) and every step's wall time."""

    wall: list[float] = field(default_factory=list)  # (steps + flush) / steps
    steps_wall: list[float] = field(default_factory=list)  # steps only
    thread: list[float] = field(default_factory=list)  # training thread CPU, steps + flush
    process: list[float] = field(default_factory=list)  # every thread's CPU, steps + flush
    off_cpu: list[float] = field(default_factory=list)  # training thread off CPU in the steps
    background: list[float] = field(default_factory=list)  # other threads' CPU: process - thread
    flush: list[float] = field(default_factory=list)  # ms per block
    backlog: list[float] = field(default_factory=list)
    collections: list[float] = field(default_factory=list)  # training thread's, per 1,000 steps
    every_step: list[float] = field(default_factory=list)
    cycle: list[int] = field(default_factory=list)  # the cycle (set of processes) of each block
    started: list[int] = field(default_factory=list)  # each cycle's start position

    def add(self, block: dict[str, Any], cycle: int) -> None:
        n = len(block["wall_ns"])
        self.cycle.append(cycle)
        steps_ns = sum(block["wall_ns"])
        thread_ns = sum(block["thread_ns"])
        self.wall.append((steps_ns + block["flush_wall_ns"]) / n / 1e6)
        self.steps_wall.append(steps_ns / n / 1e6)
        self.thread.append((thread_ns + block["flush_thread_ns"]) / n / 1e6)
        self.process.append(block["process_ns"] / n / 1e6)
        self.off_cpu.append((steps_ns - thread_ns) / n / 1e6)
        self.background.append(self.process[-1] - self.thread[-1])
        self.flush.append(block["flush_wall_ns"] / 1e6)
        self.backlog.append(float(block["backlog"]))
        self.collections.append(1000.0 * block.get("collections", 0) / n)
        self.every_step.extend(ns / 1e6 for ns in block["wall_ns"])


def _grouped(series: Series, values: list[float]) -> list[list[float]]:
    """Per-block values split by cycle (the rounds of one set of processes)."""
    groups: dict[int, list[float]] = {}
    for cycle, value in zip(series.cycle, values, strict=True):
        groups.setdefault(cycle, []).append(value)
    return [groups[c] for c in sorted(groups)]


def _paired(
    a: Series, b: Series, pick: Callable[[Series], list[float]], rng: random.Random
) -> tuple[float, tuple[float, float]]:
    return harness.paired_overhead_grouped(
        _grouped(a, pick(a)), _grouped(b, pick(b)), rng, BOOTSTRAP_RESAMPLES
    )


def report(series: dict[str, Series]) -> list[dict[str, Any]]:
    """Print the tables; return their rows (for ``--json``)."""
    rng = random.Random(0)
    names = list(series)
    harness.print_markdown_table(
        (
            "contender",
            "wall ms/step",
            "steps only",
            "p10",
            "p90",
            "thread CPU",
            "process CPU",
            "background CPU",
            "off-CPU",
            "flush ms/block",
            "backlog",
            "GC / 1k steps",
        ),
        [
            (
                name,
                f"{statistics.median(s.wall):.3f}",
                f"{statistics.median(s.steps_wall):.3f}",
                f"{harness.percentile(s.every_step, 0.1):.3f}",
                f"{harness.percentile(s.every_step, 0.9):.3f}",
                f"{statistics.median(s.thread):.3f}",
                f"{statistics.median(s.process):.3f}",
                f"{statistics.median(s.background):.3f}",
                f"{statistics.median(s.off_cpu):.3f}",
                f"{statistics.median(s.flush):.2f}",
                f"{statistics.median(s.backlog):.0f}",
                f"{statistics.fmean(s.collections):.1f}",
            )
            for name, s in series.items()
        ],
    )
    print()
    pairs = [(c, BY_NAME[c].baseline) for c in names if c != BY_NAME[c].baseline]
    pairs += [(a, b) for a, b in EXTRA_COMPARISONS]
    rows: list[dict[str, Any]] = []
    lines = []
    for a, b in pairs:
        if a not in series or b not in series:
            continue
        sa, sb = series[a], series[b]

        wall = _paired(sa, sb, lambda s: s.wall, rng)
        steps_only = _paired(sa, sb, lambda s: s.steps_wall, rng)
        thread = _paired(sa, sb, lambda s: s.thread, rng)
        process = _paired(sa, sb, lambda s: s.process, rng)
        waited = harness.paired_difference_grouped(
            _grouped(sa, sa.off_cpu), _grouped(sb, sb.off_cpu), rng, BOOTSTRAP_RESAMPLES
        )
        background = harness.paired_difference_grouped(
            _grouped(sa, sa.background), _grouped(sb, sb.background), rng, BOOTSTRAP_RESAMPLES
        )
        added = harness.paired_difference_grouped(
            _grouped(sa, sa.wall), _grouped(sb, sb.wall), rng, BOOTSTRAP_RESAMPLES
        )
        per_cycle = [
            statistics.median(c / b - 1.0 for c, b in zip(ca, cb, strict=True))
            for ca, cb in zip(_grouped(sa, sa.wall), _grouped(sb, sb.wall), strict=True)
        ]
        rows.append(
            {
                "contender": a,
                "baseline": b,
                "what": BY_NAME[a].what,
                "median_wall_ms": statistics.median(sa.wall),
                "wall": wall,
                "steps_only": steps_only,
                "thread_cpu": thread,
                "process_cpu": process,
                "added_wall_ms": added,
                "added_off_cpu_ms": waited,
                "added_background_cpu_ms": background,
                "wall_per_cycle": per_cycle,
            }
        )
        lines.append(
            (
                f"{a} / {b}",
                harness.percent_ci(*wall),
                f"{added[0]:+.3f} [{added[1][0]:+.3f}, {added[1][1]:+.3f}]",
                harness.percent_ci(*steps_only),
                f"{thread[0] * 100:+.2f}%",
                f"{process[0] * 100:+.2f}%",
                f"{background[0]:+.3f} [{background[1][0]:+.3f}, {background[1][1]:+.3f}]",
                f"{waited[0]:+.3f} [{waited[1][0]:+.3f}, {waited[1][1]:+.3f}]",
            )
        )
    harness.print_markdown_table(
        (
            "comparison",
            "wall [95% CI]",
            "added wall ms/step [95% CI]",
            "steps only [95% CI]",
            "thread CPU",
            "process CPU",
            "added background CPU ms/step [95% CI]",
            "added off-CPU ms/step [95% CI]",
        ),
        lines,
    )
    print()
    cycles = max((len(r["wall_per_cycle"]) for r in rows), default=0)
    harness.print_markdown_table(
        ("wall overhead, median of each cycle", *(f"cycle {i + 1}" for i in range(cycles))),
        [
            (
                f"{r['contender']} / {r['baseline']}",
                *(f"{v * 100:+.1f}%" for v in r["wall_per_cycle"]),
            )
            for r in rows
        ],
    )
    return rows


def print_progress(done: int, total: int) -> None:
    """Every tenth round and the last: how far, and the machine's load."""
    if done % 10 == 0 or done == total:
        print(f"  round {done}/{total}, load {harness.load_average()}", flush=True)


def finish(
    series: dict[str, Series], info: dict[str, Any], setup: str, json_path: Path | None
) -> int:
    """Print the machine, ``setup`` (what ran) and the tables, write ``--json`` (the rows and
    every block's figures), warn when the machine was busy; the exit status (1 when a
    comparison has no figure)."""
    print(harness.machine_line(info))
    print(setup)
    rows = report(series)
    if json_path is not None:
        blocks = {name: dataclasses.asdict(s) for name, s in series.items()}
        for data in blocks.values():
            del data["every_step"]
        json_path.write_text(json.dumps({"machine": info, "rows": rows, "blocks": blocks}))
    if warning := harness.busy_warning(info):
        print(warning)
    return 0 if all(math.isfinite(r["wall"][0]) for r in rows) else 1
