"""What every benchmark script measures with: clocks, rounds, workers, statistics, tables.

The scripts differ in what they time; how they time it is shared here so that a figure means
the same thing in every table: per-call times come from ``time_calls``/``per_call_us``,
contenders take turns in ``interleaved_rounds`` (so load from other work hits them alike),
fresh-process measurements go through ``run_worker``/``emit_result``, and the machine a figure
was taken on is described by ``machine_info``. Scripts import it as ``harness`` (they are run
from ``benchmarks/``, which Python puts first on ``sys.path``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

RESULT_TAG = "@@BENCH_RESULT@@ "
WORKER_TIMEOUT_S = 3600


# ---- clocks ------------------------------------------------------------------------------------


@dataclass
class Timings:
    """Per-call nanoseconds of ``time_calls``: wall, calling-thread CPU, process CPU."""

    wall_ns: list[int] = field(default_factory=list)
    thread_ns: list[int] = field(default_factory=list)
    process_ns: list[int] = field(default_factory=list)
    last: Any = None


def time_calls(
    call: Callable[[], Any], k: int, warmup: int = 0, before: Callable[[], Any] | None = None
) -> Timings:
    """Time ``k`` calls one by one (after ``warmup`` untimed ones); ``before`` runs untimed
    ahead of each call (a barrier, say). The last call's result is kept in ``last``."""
    perf, thread_cpu, process_cpu = time.perf_counter_ns, time.thread_time_ns, time.process_time_ns
    out = Timings()
    for i in range(warmup + k):
        if before is not None:
            before()
        p0, c0, w0 = process_cpu(), thread_cpu(), perf()
        out.last = call()
        w1, c1, p1 = perf(), thread_cpu(), process_cpu()
        if i >= warmup:
            out.wall_ns.append(w1 - w0)
            out.thread_ns.append(c1 - c0)
            out.process_ns.append(p1 - p0)
    return out


def per_call_us(
    call: Callable[[int], Any],
    calls: int,
    rounds: int,
    between: Callable[[], Any] | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
    first: int = 0,
) -> list[float]:
    """Mean µs per call of ``calls`` calls (``call(i)``, ``i`` from ``first``), once per round;
    ``between`` runs untimed after each round (a flush, so a queue never fills). One figure per
    round. ``clock`` is ``time.thread_time_ns`` for the calling thread's CPU."""
    results = []
    for _ in range(rounds):
        start = clock()
        for i in range(first, first + calls):
            call(i)
        results.append((clock() - start) / calls / 1e3)
        if between is not None:
            between()
    return results


def children_cpu_ns() -> int:
    """CPU of child processes (wandb's service): live ones via psutil, plus reaped ones."""
    total = 0.0
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
    except ImportError:
        pass
    reaped = os.times()
    total += reaped.children_user + reaped.children_system
    return int(total * 1e9)


def system_busy_s() -> float:
    """CPU seconds all processes on the machine have used (0 without psutil)."""
    try:
        import psutil
    except ImportError:
        return 0.0
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))


# ---- rounds ------------------------------------------------------------------------------------


def interleaved_rounds(
    contenders: Sequence[T],
    rounds: int,
    run: Callable[[T, int, bool], Any],
    *,
    order: str = "shuffle",
    rng: random.Random | None = None,
    warmup_rounds: int = 0,
    progress: Callable[[int, int], Any] | None = None,
) -> None:
    """Run every contender once per round: ``run(contender, round_index, recorded)``.

    ``order``: ``"shuffle"`` (a fresh random order each round, from ``rng``), ``"balanced"``
    (every permutation of the contenders once per cycle of rounds, the cycle shuffled: each
    contender runs right after each other one equally often, so what a block leaves behind,
    a detach's garbage or a writer's last flush, lands on every contender alike; for up to
    five contenders, beyond that it shuffles), ``"alternate"`` (as given, reversed every
    other round) or ``"fixed"``. The first ``warmup_rounds`` rounds run with
    ``recorded=False``. ``progress(done, total)`` is called after each round.
    """
    current = list(contenders)
    shuffle = (rng or random.Random()).shuffle
    total = warmup_rounds + rounds
    cycle: list[tuple[T, ...]] = []
    if order == "balanced" and len(current) <= 5:
        cycle = list(itertools.permutations(current))
    for index in range(total):
        if cycle:
            if (index - warmup_rounds) % len(cycle) == 0 or index == 0:
                shuffle(cycle)
            current = list(cycle[(index - warmup_rounds) % len(cycle)])
        elif order in ("shuffle", "balanced"):
            shuffle(current)
        elif order == "alternate":
            current = list(contenders) if index % 2 == 0 else list(reversed(contenders))
        for contender in current:
            run(contender, index, index >= warmup_rounds)
        if progress is not None:
            progress(index + 1, total)


# ---- statistics --------------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def bootstrap_median(
    values: Sequence[float], rng: random.Random, resamples: int
) -> tuple[float, tuple[float, float]]:
    """The median of ``values`` (one per round) and a bootstrap 95 % interval over rounds."""
    n = len(values)
    boots = [
        statistics.median(values[rng.randrange(n)] for _ in range(n)) for _ in range(resamples)
    ]
    return statistics.median(values), (percentile(boots, 0.025), percentile(boots, 0.975))


def paired_overhead(
    contender: Sequence[float], baseline: Sequence[float], rng: random.Random, resamples: int
) -> tuple[float, tuple[float, float]]:
    """Median over rounds of contender/baseline - 1, and a bootstrap 95 % interval (rounds)."""
    ratios = [c / b - 1.0 for c, b in zip(contender, baseline, strict=True)]
    return bootstrap_median(ratios, rng, resamples)


def paired_difference(
    contender: Sequence[float], baseline: Sequence[float], rng: random.Random, resamples: int
) -> tuple[float, tuple[float, float]]:
    """Median over rounds of contender - baseline, and a bootstrap 95 % interval (rounds):
    what a contender adds in absolute terms (µs per step) when the baseline is tiny."""
    differences = [c - b for c, b in zip(contender, baseline, strict=True)]
    return bootstrap_median(differences, rng, resamples)


def bootstrap_median_grouped(
    groups: Sequence[Sequence[float]], rng: random.Random, resamples: int
) -> tuple[float, tuple[float, float]]:
    """The median of every value (one per round; a group is the rounds of one set of processes)
    and a two-level bootstrap 95 % interval: groups resampled, then rounds within each chosen
    group. The interval so holds how much groups differ (a process's own speed: its memory
    placement, its CPU), which resampling rounds alone would hide."""
    groups = [list(g) for g in groups if g]
    flat = [v for g in groups for v in g]
    boots = []
    for _ in range(resamples):
        sample: list[float] = []
        for _ in range(len(groups)):
            group = groups[rng.randrange(len(groups))]
            sample.extend(group[rng.randrange(len(group))] for _ in range(len(group)))
        boots.append(statistics.median(sample))
    return statistics.median(flat), (percentile(boots, 0.025), percentile(boots, 0.975))


def paired_overhead_grouped(
    contender: Sequence[Sequence[float]],
    baseline: Sequence[Sequence[float]],
    rng: random.Random,
    resamples: int,
) -> tuple[float, tuple[float, float]]:
    """``paired_overhead`` over rounds in groups (see ``bootstrap_median_grouped``)."""
    ratios = [
        [c / b - 1.0 for c, b in zip(cg, bg, strict=True)]
        for cg, bg in zip(contender, baseline, strict=True)
    ]
    return bootstrap_median_grouped(ratios, rng, resamples)


def paired_difference_grouped(
    contender: Sequence[Sequence[float]],
    baseline: Sequence[Sequence[float]],
    rng: random.Random,
    resamples: int,
) -> tuple[float, tuple[float, float]]:
    """``paired_difference`` over rounds in groups (see ``bootstrap_median_grouped``)."""
    differences = [
        [c - b for c, b in zip(cg, bg, strict=True)]
        for cg, bg in zip(contender, baseline, strict=True)
    ]
    return bootstrap_median_grouped(differences, rng, resamples)


def percent_ci(estimate: float, interval: tuple[float, float]) -> str:
    """An overhead with its interval, as ``+1.37% [-5.56%, +8.66%]``."""
    low, high = interval
    return f"{estimate * 100:+.2f}% [{low * 100:+.2f}%, {high * 100:+.2f}%]"


def summary_us(values_ns: Sequence[int]) -> dict[str, float]:
    """Median, p10, p90 (nearest rank) and mean of nanosecond samples, in µs."""
    us = sorted(v / 1e3 for v in values_ns)
    return {
        "median_us": statistics.median(us),
        "p10_us": us[len(us) // 10],
        "p90_us": us[(len(us) * 9) // 10],
        "mean_us": statistics.fmean(us),
    }


# ---- workers -----------------------------------------------------------------------------------


def emit_result(result: dict[str, Any]) -> None:
    """A worker's answer to ``run_worker``: one tagged JSON line on stdout."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def run_worker(
    script: str | Path,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter and return what it passed to ``emit_result``.

    On failure the answer is ``{"error": ...}`` (exit status and the last lines of output).
    Adds ``other_load_pct``: CPU used by other processes on the machine while the worker ran,
    as a share of all CPUs (a benchmark's numbers are only clean when this is near 0).
    """
    cmd = [sys.executable, str(Path(script).resolve()), *args]
    busy0, mine0, wall0 = system_busy_s(), os.times(), time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {timeout_s:g} s"}
    busy1, mine1, wall1 = system_busy_s(), os.times(), time.perf_counter()
    mine = (mine1.children_user + mine1.children_system + mine1.user + mine1.system) - (
        mine0.children_user + mine0.children_system + mine0.user + mine0.system
    )
    other = max(0.0, (busy1 - busy0) - mine)
    other_pct = 100 * other / ((wall1 - wall0) * (os.cpu_count() or 1)) if busy1 else float("nan")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            result: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            result["other_load_pct"] = other_pct
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"worker exited {proc.returncode}: " + " | ".join(tail)}


def run_worker_quietly(
    script: str | Path,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    retries: int = 0,
    max_other_load_pct: float = math.inf,
    pause_s: float = 2.0,
    timeout_s: float = WORKER_TIMEOUT_S,
    measured: Callable[[dict[str, Any]], bool] = lambda result: "error" not in result,
) -> dict[str, Any]:
    """``run_worker``, redone up to ``retries`` times (after ``pause_s``) while other processes
    used more than ``max_other_load_pct`` % of the CPUs meanwhile; the quietest answer is kept.

    Why: on a shared machine one busy moment inflates a fresh-process measurement; redoing it
    is cheaper than discarding the round. An answer that ``measured`` rejects (by default a
    failed worker) is not redone.
    """
    best: dict[str, Any] = {}
    for attempt in range(1 + retries):
        if attempt:
            time.sleep(pause_s)
        result = run_worker(script, args, env, timeout_s)
        load = result.get("other_load_pct", 0.0)
        if not best or load < best.get("other_load_pct", 0.0):
            best = result
        if not measured(result) or not load > max_other_load_pct:
            break
    return best


# ---- the machine -------------------------------------------------------------------------------


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``"1.23 0.98 0.50"``."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def machine_info(modules: Sequence[str] = ("trainmon",)) -> dict[str, Any]:
    """Python, platform, CPUs, load, CPU model, the versions of ``modules`` and the commit."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for module in modules:
        try:
            info[module] = __import__(module).__version__
        except Exception:
            info[module] = "not installed"
    info["trainmon_commit"] = source_revision()
    return info


def machine_line(info: dict[str, Any]) -> str:
    """``machine_info`` on one line, as every script prints it above its tables."""
    return "machine: " + ", ".join(f"{k}={v}" for k, v in info.items())


def busy_warning(info: dict[str, Any]) -> str:
    """A warning when the 1-minute load at the start (``info``) or now exceeds half the CPUs:
    CPU times are then inflated by other work. Empty when the machine was quiet."""
    load = max(os.getloadavg()[0], float(info.get("loadavg_1m", 0.0)))
    if load > 0.5 * (os.cpu_count() or 1):
        return f"WARNING: the machine was busy with other work (load {load:.2f}); times inflated."
    return ""


def source_revision() -> str:
    """The commit trainmon was measured at, ``+dirty`` when src/ has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


# ---- tables ------------------------------------------------------------------------------------


def fmt(value: float, digits: int = 3) -> str:
    """A figure for a table: ``-`` for NaN, no decimals from 100, one from 10."""
    if value != value:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}f}"


def print_markdown_table(headers: Sequence[str], lines: Sequence[Sequence[str]]) -> None:
    """A padded Markdown table: first column left-aligned, the others right-aligned. A line
    shorter than the header (a note such as "unavailable: ...") fills the second column."""
    widths = [len(h) for h in headers]
    for line in lines:
        if len(line) == len(headers):
            widths = [max(w, len(c)) for w, c in zip(widths, line, strict=True)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        if len(line) == len(headers):
            cells = [line[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
            ]
        else:
            cells = [line[0].ljust(widths[0]), *line[1:]]
        print("| " + " | ".join(cells) + " |")


def print_columns(
    headers: Sequence[tuple[str, int]], lines: Iterable[Sequence[str]], rule: bool = False
) -> None:
    """A plain aligned table: ``headers`` are ``(title, width)``, a negative width left-aligns
    (the first column). ``rule`` draws a line of dashes under the header."""

    def row(cells: Sequence[str]) -> str:
        return " ".join(
            c.ljust(-w) if w < 0 else c.rjust(w) for c, (_, w) in zip(cells, headers, strict=True)
        )

    header = row([h for h, _ in headers])
    print(header)
    if rule:
        print("-" * len(header))
    for line in lines:
        print(row(line))
