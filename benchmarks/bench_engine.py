"""What ``trainmon.initialize``'s engine costs a training step, next to a bare PyTorch loop.

Why: trainmon promises monitoring "without slowing training down" (targets: at most 2 %
with every writer on and a window of one step, at most 1 % with the default window of 10
steps, against a bare loop; DeepSpeed 0.19.8's own monitor was measured by the team at about
22 % on the CPU). A per-step overhead of a few tenths of a percent is far below the noise of a
shared VM, so the contenders run interleaved in ONE process, on ONE model and optimizer:
each round runs one block of steps of every contender, in a shuffled order, and the
comparison is made round by round (paired), so slow drifts of the machine cancel out.

Contenders (an MLP 256→1024→1024→10, batch 64, AdamW, cross-entropy):

* ``A``   bare loop: forward, loss, backward, ``optimizer.step()``, ``zero_grad()``;
* ``A'``  bare loop plus the global gradient norm each step (``get_total_norm``, what a user
  who logs the grad norm pays anyway; the engine always computes it);
* ``A''`` bare loop with ``clip_grad_norm_(params, 1.0)`` (the usual LLM set-up);
* ``An``  bare loop plus the engine's own norm call, as the engine's training thread runs it
  (so the engine's bookkeeping can be taken without the norm's cost inside a step);
* ``B1``  ``trainmon.initialize`` engine, TensorBoard + CSV + JSONL writers, console off,
  ``wall_clock_breakdown``, ``steps_per_print: 1`` (a window closes and is written every step);
* ``B2``  the same with the default window (``steps_per_print: 10``);
* ``B3``  ``B2`` with ``gradient_clipping: 1.0`` (compare with ``A''``: the norm is free there).

Per step it records wall time (``perf_counter_ns``) and the training thread's CPU time
(``thread_time_ns``). After each engine block ``monitor.flush()`` waits (outside the timed
steps) until the background thread has written the block, so that its work is charged to that
block's "other threads" CPU and never spills into the next contender's block (this also
flushes the writers once per block rather than once a second).

Because a 2-core shared VM does not resolve 1 % of a ~15 ms step, two resolvable parts are
measured too: the same seven contenders on a tiny model (``Linear(16, 10)``, ~0.4 ms steps),
where the engine's fixed bookkeeping per step shows; and each gradient-norm routine timed
alone on the MLP's gradients. Their sum is the work the engine adds to the training thread of
an MLP step (interference from the background thread is not in it; only the direct,
noisier comparison includes that).

Then a separate, untimed run counts the calls that read a tensor on the host or synchronise
with a device (``Tensor.item``, ``tolist``, ``cpu``, ``numpy``, ``__float__``, ``__bool__``,
... via a ``TorchFunctionMode`` on the training thread, plus ``torch.cuda.synchronize``)
during engine steps and during bare steps, with the caller of each.

The contenders, the host-read counter and the tables are in ``engine_bench/`` (``contenders``,
``host_reads``, ``report``); this script runs the rounds and the suites.

Run: ``.venv/bin/python benchmarks/bench_engine.py [--blocks 100] [--steps 6] [--threads 1]``
     ``.venv/bin/python benchmarks/bench_engine.py --quick``   (a smoke run, numbers are noise)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import harness
from engine_bench.contenders import (
    BATCH,
    ENGINE_NORM,
    IN_FEATURES,
    TINY_FEATURES,
    Contender,
    build_contenders,
    build_model,
    make_batches,
)
from engine_bench.host_reads import count_host_reads
from engine_bench.report import (
    DEEPSPEED_REPORTED,
    TARGET_DEFAULT_WINDOW,
    TARGET_EVERY_STEP,
    Suite,
    compare,
    print_host_reads,
    print_projection,
    print_suite,
    suite_json,
)

try:  # what the engine runs on the training thread for its grad norm
    from trainmon.collect.instrument.gradnorm import grad_norm as engine_grad_norm
except ImportError:  # a trainmon from before the instrument component, for before/after runs
    from trainmon.collect.meters import total_grad_norm as engine_grad_norm

# ---- measuring --------------------------------------------------------------------------------


def run_block(
    contender: Contender,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    offset: int,
    record: bool,
) -> None:
    """``steps`` timed steps of one contender, then (engines) a flush outside the timed steps."""
    perf, thread_cpu, process_cpu = time.perf_counter_ns, time.thread_time_ns, time.process_time_ns
    step = contender.step
    walls: list[int] = []
    cpus: list[int] = []
    process_start, thread_start = process_cpu(), thread_cpu()
    count = len(batches)
    for i in range(steps):
        x, y = batches[(offset + i) % count]
        w0, c0 = perf(), thread_cpu()
        step(x, y)
        c1, w1 = thread_cpu(), perf()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
    if contender.engine is not None:
        contender.engine.monitor.flush()
    other = (process_cpu() - process_start) - (thread_cpu() - thread_start)
    if not record:
        return
    contender.wall_ns.extend(walls)
    contender.cpu_ns.extend(cpus)
    contender.block_wall_ms.append(statistics.median(walls) / 1e6)
    contender.block_cpu_ms.append(statistics.median(cpus) / 1e6)
    contender.other_cpu_ns += other
    contender.other_steps += steps


def run_rounds(
    contenders: list[Contender],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    rounds: int,
    steps: int,
    warmup_rounds: int,
    seed: int,
) -> None:
    """Rounds of one block per contender, each round in a fresh random order."""
    offset = 0

    def block(contender: Contender, _index: int, recorded: bool) -> None:
        nonlocal offset
        run_block(contender, batches, steps, offset, record=recorded)
        offset += steps

    def progress(done: int, total: int) -> None:
        if done == warmup_rounds or (done - warmup_rounds) % 5 == 0:
            print(f"  round {done}/{total} done", file=sys.stderr, flush=True)

    harness.interleaved_rounds(
        contenders,
        rounds,
        block,
        rng=random.Random(seed),
        warmup_rounds=warmup_rounds,
        progress=progress,
    )


# ---- components, timed alone ------------------------------------------------------------------


def time_norms(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    rounds: int,
) -> dict[str, float]:
    """Median µs of each gradient-norm routine on this model's gradients, calls interleaved.

    The per-step comparisons cannot resolve a few hundred µs on a noisy machine; these can.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    x, y = batch
    loss: Any = F.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)
    routines: dict[str, Callable[[], Any]] = {
        ENGINE_NORM: lambda: engine_grad_norm(grads, True),
        "clip_grad_norm_(params, 1.0)": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0),
    }
    if get_total_norm is not None:
        routines["get_total_norm(grads)"] = lambda: get_total_norm(grads)
    samples: dict[str, list[int]] = {name: [] for name in routines}
    perf = time.perf_counter_ns

    def timed(name: str, _index: int, recorded: bool) -> None:
        routine = routines[name]
        t0 = perf()
        routine()
        elapsed = perf() - t0
        if recorded:
            samples[name].append(elapsed)

    harness.interleaved_rounds(list(routines), rounds, timed, order="fixed", warmup_rounds=20)
    optimizer.zero_grad(set_to_none=True)
    return {name: statistics.median(values) / 1e3 for name, values in samples.items()}


# ---- suites ------------------------------------------------------------------------------------


def run_suite(
    name: str, tiny: bool, args: argparse.Namespace, out_dir: Path, rounds: int, steps: int
) -> Suite:
    """Build the model and every contender, run the rounds, optionally count host reads."""
    model = build_model(args.seed, tiny)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    features = TINY_FEATURES if tiny else IN_FEATURES
    batches = make_batches(8, args.seed + 1, features)
    contenders = build_contenders(model, optimizer, out_dir / name, engine_grad_norm)
    by_key = {c.key: c for c in contenders}
    started = time.perf_counter()
    host_reads: dict[str, dict[str, int]] = {}
    try:
        print(
            f"[{name}] {len(contenders)} contenders, {args.warmup}+{rounds} rounds x {steps} "
            f"steps, torch threads {args.threads}",
            file=sys.stderr,
        )
        gc.collect()
        run_rounds(contenders, batches, rounds, steps, args.warmup, args.seed)
        seconds = time.perf_counter() - started
        norms_us = time_norms(model, optimizer, batches[0], args.norm_rounds)
        if not tiny:
            for key in ("A", "B1", "B2", "B3"):
                label = f"{key} ({by_key[key].label})"
                host_reads[label] = count_host_reads(by_key[key], batches, args.count_steps)
    finally:
        for c in contenders:
            if c.engine is not None:
                c.engine.close()
    plan = (
        ("B1 / A", "B1", "A", TARGET_EVERY_STEP),
        ("B2 / A", "B2", "A", TARGET_DEFAULT_WINDOW),
        ("B1 / A'", "B1", "A'", TARGET_EVERY_STEP),
        ("B2 / A'", "B2", "A'", TARGET_DEFAULT_WINDOW),
        ("B3 / A''", "B3", "A''", TARGET_DEFAULT_WINDOW),
        ("A' / A (the norm alone)", "A'", "A", None),
    )
    comparisons = [
        compare(label, by_key[c], by_key[b], None if tiny else target, args.seed)
        for label, c, b, target in plan
    ]
    return Suite(name, contenders, comparisons, rounds, steps, seconds, host_reads, norms_us)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=100, help="rounds (blocks per contender)")
    parser.add_argument("--steps", type=int, default=6, help="steps per block")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--count-steps", type=int, default=50, help="steps of the host-read check")
    parser.add_argument("--tiny-blocks", type=int, default=40, help="rounds on the tiny model")
    parser.add_argument("--tiny-steps", type=int, default=100, help="steps per tiny block")
    parser.add_argument("--no-tiny", action="store_true", help="skip the tiny-model suite")
    parser.add_argument("--norm-rounds", type=int, default=300, help="calls per norm routine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run; numbers are noise")
    parser.add_argument("--keep", action="store_true", help="keep the engines' output folder")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.blocks, args.steps, args.warmup, args.count_steps = 6, 10, 1, 20
        args.tiny_blocks, args.tiny_steps, args.norm_rounds = 6, 50, 30

    torch.set_num_threads(args.threads)
    out_dir = Path(tempfile.mkdtemp(prefix="trainmon-bench-engine-"))
    load_start = harness.load_average()
    suites = [run_suite("MLP 256-1024-1024-10", False, args, out_dir, args.blocks, args.steps)]
    if not args.no_tiny:
        suites.append(
            run_suite("tiny Linear(16, 10)", True, args, out_dir, args.tiny_blocks, args.tiny_steps)
        )
    load_end = harness.load_average()
    meta = {
        "cpus": os.cpu_count(),
        "load_start": load_start,
        "load_end": load_end,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": args.threads,
        "warmup_rounds": args.warmup,
        "count_steps": args.count_steps,
    }
    print()
    print(
        f"Machine: {meta['cpus']} CPUs, load average at start {load_start}, at end {load_end}; "
        f"Python {meta['python']}, torch {meta['torch']}, torch threads {args.threads}; "
        f"{args.warmup} untimed warm-up round(s) per suite; batch {BATCH}, AdamW."
    )
    for suite in suites:
        print_suite(suite)
    if len(suites) == 2:
        print_projection(suites[0], suites[1])
    print()
    print(
        f"For scale: the team measured DeepSpeed 0.19.8's monitor at about "
        f"{DEEPSPEED_REPORTED * 100:.0f}% on the CPU (not re-measured here)."
    )
    print_host_reads(suites[0], args.count_steps)
    if args.json is not None:
        payload = {"meta": meta, "suites": [suite_json(s) for s in suites]}
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    if args.keep:
        print(f"engine outputs kept in {out_dir}")
    else:
        shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
