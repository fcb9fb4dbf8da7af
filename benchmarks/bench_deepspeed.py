"""What monitoring costs a real DeepSpeed step in WALL time: bare, DeepSpeed's own monitor,
``trainmon.attach`` and its parts, side by side.

The promise under test (issue 25): monitoring never slows training in the user's wall time.
The headline is therefore the wall time per step; the training thread's CPU time and the
process's CPU time (every thread: DeepSpeed, trainmon's background) are beside it.

Shape (issue 25's harness): DeepSpeed 0.19.8 on the CPU accelerator (gloo, one rank),
``torch.set_num_threads(1)``, an MLP of 4 x Linear(512, 512) with ReLU between, batch 32, MSE
loss, Adam lr 1e-3 (``"torch_adam": true``), ZeRO 0, fp32, DeepSpeed's default
``gradient_clipping: 1.0``, ``steps_per_print: 10``; the console is off everywhere.

How the contenders run
----------------------
Each contender is its own process (``--worker NAME``), as in real use: a monitor's background
threads compete for their own process's GIL only, and the bare engine's process has no
trainmon thread at all (in one shared process, every idle monitor's threads would tax the bare
engine too). The parent drives them in lock step over pipes: each round runs one block of
``--steps`` steps of every contender, one contender at a time, in a shuffled order
(``harness.interleaved_rounds``), so load from other work on the machine hits them alike.

Processes differ: two identical bare processes here run the same steps at speeds up to ~15 %
apart (in their own CPU time too, so not the scheduler: most likely where their tensors landed
in memory), for as long as they live. One set of processes would pass that difference off as
an overhead, so the run has ``--cycles`` cycles, each with a fresh process per contender
(started in a random order) and ``--rounds`` rounds; the overheads are the median over every
round, and their interval comes from a two-level bootstrap (cycles, then rounds within them:
``harness.paired_overhead_grouped``), so it includes the differences between processes.
``bare-twin`` (bare again) is the A/A control: its "overhead" is the noise floor of the run.

What a block's time includes (the choice, and why)
--------------------------------------------------
A block is ``--steps`` training steps followed by ``monitor.flush()``, and the WHOLE of it is
timed: the block's wall time per step is ``(steps + flush) / steps``. Trainmon's background
threads run concurrently with the timed steps, as in real use (they take the GIL and a core
while the training thread steps: that cost lands in the steps' wall time); whatever they had
not finished when the last step returned (the backlog of the last poll interval, the writers'
work and their flush to the OS) is drained inside the block's time by the flush, so no
background work is hidden and none spills into the next contender's block. This is an upper
bound of the real cost: the flush forces the writers' flush to the OS once per block (about
4 per second here, against one per ``flush_interval_s`` = 1 s in real use), and the tail drains
while the training thread waits instead of overlapping with the next steps. The
``steps only`` figure (the same blocks, the flush left out) is the lower bound: background
work that overlapped with the steps is in it, the tail is not. The previous version of this
script flushed OUTSIDE the timed steps and reported the training thread's CPU time as its
headline, which hid the background's cost (+0.38 % there, against +7.1 % wall measured by the
issue's side-by-side harness).

Overheads are paired per round (the block's mean step time over the bare engine's block of the
same round, as in the issue's harness).

Contenders (``CONTENDERS``): ``bare``; ``bare-twin``; ``ds`` (DeepSpeed's own TensorBoard + CSV +
``wall_clock_breakdown``); ``attach`` (everything: TensorBoard + CSV + journal + the breakdown
every step, DeepSpeed's events through trainmon); the split: ``attach-nothing`` (writers and
breakdown off), ``attach-no-threads`` (also no system sampler, no profiler listener),
``attach-writers`` (TensorBoard + CSV + journal, no breakdown), ``attach-breakdown`` (no
writer), ``attach-tb``, ``attach-csv``, ``attach-journal`` (each writer alone, no breakdown);
the gradient norm trainmon computes at ZeRO 0 when DeepSpeed does not clip (with clipping it
keeps DeepSpeed's): ``bare-noclip``, ``attach-noclip`` (writers and breakdown off, the norm
every step), ``attach-noclip-nonorm`` (``trainmon.grad_norm_every: 0``); the GIL hand-over:
``bare@si0.5ms`` and ``attach@si0.5ms`` run with ``sys.setswitchinterval(0.0005)`` (Python's
default is 5 ms: a thread that wants the GIL back waits up to that long for a background thread
running Python).

Columns: ``off-CPU`` is the training thread's wall minus its CPU time during the steps: the
time it was runnable or waiting but not running (the GIL, the OS scheduler, I/O); the added
off-CPU time over the bare engine is what the background's GIL holding (and its CPU on a busy
machine) costs the training thread. ``background CPU`` is the process's CPU time minus the
training thread's: trainmon's threads (and DeepSpeed's, gloo's), per step. Both are
differences of two clocks of one process, so a process's own speed hardly moves them: they
resolve where the wall figures, at this noise, do not. ``backlog`` is the events still queued
when the block's last step returned.

Run: ``DS_ACCELERATOR=cpu PYTHONPATH=src .venv/bin/python benchmarks/bench_deepspeed.py
[--cycles 10] [--rounds 9] [--steps 20] [--only a,b] [--json out.json] [--pin CPU] [--tiny]``
(10 x 9 x 20 = 1,800 steps per contender, issue 25's 3 x 600); ``--quick`` is a smoke
run (numbers are noise). ``--gil-profile A,B`` runs each contender alone, its process
sampled by ``py-spy record --gil`` (only the thread that holds the GIL is sampled; ``pip install
py-spy``, attaching to a process of the same user), and prints each thread's GIL time per
step. ``--tiny``: Linear(16, 16), where the fixed cost per step shows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import harness
from deepspeed_bench.contenders import (
    BATCH,
    BY_NAME,
    CONTENDERS,
    Contender,
    attach_config,
    model_label,
    one_rank_engine,
    time_block,
    writers_folder,
)
from deepspeed_bench.report import Series, finish, print_progress


class Worker:
    """One contender's engine (and monitor), stepping one timed block at a time."""

    def __init__(
        self, contender: Contender, out: Path, steps: int, tiny: bool, pin: int | None
    ) -> None:
        import trainmon

        self.engine, batches = one_rank_engine(contender, out, tiny)
        self.folder = writers_folder(contender, out) if contender.attach else None
        self.monitor = (
            trainmon.attach(self.engine, attach_config(contender, self.folder))
            if self.folder is not None
            else None
        )
        self.batches = [batches[i % len(batches)] for i in range(steps)]
        if pin is not None:
            # this (the training) thread only, after every thread was started (threads started
            # later inherit it): the background threads may run on any CPU
            os.sched_setaffinity(0, {pin})
        for _ in range(2):  # warm-up, untimed
            self.block()

    def block(self) -> dict[str, Any]:
        """One timed block (see :func:`~deepspeed_bench.contenders.time_block`)."""
        return time_block(self.engine, self.batches, self.monitor)

    def close(self) -> dict[str, Any]:
        if self.monitor is None:
            return {}
        self.monitor.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        return {"undelivered": self.monitor.undelivered}


def worker_main(name: str, out: Path, steps: int, tiny: bool, pin: int | None) -> int:
    """``--worker``: answer the parent's commands (``block``, ``quit``), one tagged JSON line
    each on the original stdout (everything else printed goes to stderr)."""
    protocol: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # DeepSpeed's and torch's prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    worker = Worker(BY_NAME[name], out, steps, tiny, pin)

    def answer(message: dict[str, Any]) -> None:
        protocol.write(harness.RESULT_TAG + json.dumps(message) + "\n")

    answer({"ready": name, "pid": os.getpid()})
    for line in sys.stdin:
        command = line.strip()
        if command == "block":
            answer(worker.block())
        elif command == "quit":
            answer(worker.close())
            return 0
    return 0


# ---- the parent: drives the workers in lock step ----------------------------------------------


class WorkerProcess:
    """A ``--worker`` child and its pipes."""

    def __init__(self, name: str, args: argparse.Namespace, out: Path, log: IO[str]) -> None:
        self.name = name
        self.log_path = log.name
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", name]
        command += ["--steps", str(args.steps), "--out", str(out)]
        if args.pin is not None:
            command += ["--pin", str(args.pin)]
        if args.tiny:
            command.append("--tiny")
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(harness.RESULT_TAG):
                answer: dict[str, Any] = json.loads(line[len(harness.RESULT_TAG) :])
                return answer
        raise RuntimeError(
            f"worker {self.name} exited {self.proc.wait()}; its output is in {self.log_path}"
        )

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.receive()


def run_rounds(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Series]:
    """``--cycles`` times: start a fresh worker per contender, run ``--rounds`` interleaved
    rounds (after one unrecorded), close them."""
    out = Path(tempfile.mkdtemp(prefix="bench-ds-"))
    series = {name: Series() for name in names}
    order = random.Random(2)
    for cycle in range(args.cycles):
        print(f"cycle {cycle + 1}/{args.cycles}: starting {len(names)} workers", flush=True)
        run_cycle(args, names, out, cycle, series, order)
    shutil.rmtree(out, ignore_errors=True)
    return series


def run_cycle(
    args: argparse.Namespace,
    names: Sequence[str],
    out: Path,
    cycle: int,
    series: dict[str, Series],
    order: random.Random,
) -> None:
    """One set of workers: started, stepped in interleaved rounds, closed."""
    with open(out / "workers.log", "a") as log:
        # started in a fresh random order each cycle: where a process starts (its place among
        # the others in memory and on the CPUs) must not stay with one contender
        starting = list(names)
        order.shuffle(starting)
        workers = {name: WorkerProcess(name, args, out / str(cycle), log) for name in starting}
        for position, name in enumerate(starting):
            series[name].started.append(position)
        try:
            for worker in workers.values():
                worker.receive()  # ready: built and warmed up

            def block(name: str, _index: int, recorded: bool) -> None:
                answer = workers[name].ask("block")
                if recorded:
                    series[name].add(answer, cycle)

            harness.interleaved_rounds(
                list(names), args.rounds, block, rng=order, warmup_rounds=1, progress=print_progress
            )
            for name, worker in workers.items():
                final = worker.ask("quit")
                if final.get("undelivered"):
                    print(f"WARNING: {name} did not deliver {final['undelivered']}")
        finally:
            for worker in workers.values():
                try:
                    worker.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    worker.proc.kill()


def gil_profile(args: argparse.Namespace) -> int:
    """``--gil-profile A,B``: each contender alone (one after the other), its worker sampled by
    ``py-spy record --gil`` (only the thread holding the GIL is sampled) during ``--rounds``
    blocks, after its warm-up; prints each thread's GIL time per step."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy not found: pip install py-spy")
        return 1
    rate = args.gil_rate
    out = Path(tempfile.mkdtemp(prefix="bench-ds-gil-"))
    for name in args.gil_profile.split(","):
        raw = out / f"{name}.txt"
        with open(out / "workers.log", "a") as log:
            worker = WorkerProcess(name, args, out, log)
            ready = worker.receive()
            command = [py_spy, "record", "--pid", str(ready["pid"]), "--gil", "--threads"]
            command += ["--nonblocking", "-r", str(rate), "-f", "raw", "-o", str(raw)]
            spy = subprocess.Popen(command, stdout=log, stderr=log)
            time.sleep(2.0)  # py-spy attached and sampling
            series = Series()
            for _ in range(args.rounds):
                series.add(worker.ask("block"), 0)
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
            worker.ask("quit")
            worker.proc.wait(timeout=60)
        if not raw.exists():
            print(f"{name}: py-spy wrote nothing (see {out / 'workers.log'})")
            return 1
        by_thread: dict[str, int] = {}
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            thread = stack.split(";", 1)[0]
            label = thread.split(": ", 1)[1] if ": " in thread else thread
            by_thread[label] = by_thread.get(label, 0) + int(count)
        steps = len(series.every_step)
        wall_s = sum(series.wall) * args.steps / 1e3
        print(
            f"{name}: {steps} steps, {statistics.median(series.wall):.3f} ms/step wall under "
            f"py-spy ({rate} Hz, non-blocking), load {harness.load_average()}"
        )
        total = sum(by_thread.values())
        lines = [
            (
                label,
                str(count),
                f"{count / rate * 1e3 / steps:.3f}",
                f"{count / rate / wall_s * 100:.1f}%",
            )
            for label, count in sorted(by_thread.items(), key=lambda kv: -kv[1])
            if count / total >= 0.001
        ]
        lines.append(
            (
                "all threads",
                str(total),
                f"{total / rate * 1e3 / steps:.3f}",
                f"{total / rate / wall_s * 100:.1f}%",
            )
        )
        harness.print_markdown_table(
            ("thread holding the GIL", "samples", "ms/step", "share of wall"), lines
        )
        print()
    shutil.rmtree(out, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cycles", type=int, default=10, help="fresh sets of workers")
    parser.add_argument("--rounds", type=int, default=9, help="blocks per contender per cycle")
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 rounds of 5 steps")
    parser.add_argument("--tiny", action="store_true", help="Linear(16, 16): the fixed cost")
    parser.add_argument("--only", help="comma-separated contenders (baselines are added)")
    parser.add_argument(
        "--pin",
        type=int,
        metavar="CPU",
        help="run every worker's training thread on this CPU (its other threads anywhere)",
    )
    parser.add_argument("--json", type=Path, help="write the comparisons here")
    parser.add_argument(
        "--gil-profile", metavar="A,B", help="each contender alone under py-spy --gil"
    )
    parser.add_argument("--gil-rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.rounds, args.steps = 1, 3, 5
    if args.worker:
        return worker_main(args.worker, args.out, args.steps, args.tiny, args.pin)
    if args.gil_profile:
        return gil_profile(args)
    names = [c.name for c in CONTENDERS]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - set(BY_NAME)
        if unknown:
            parser.error(f"--only: unknown contenders {sorted(unknown)}; known: {names}")
        wanted |= {BY_NAME[n].baseline for n in wanted}
        names = [n for n in names if n in wanted]
    load_start = harness.load_average()
    info = harness.machine_info(("trainmon", "torch", "deepspeed"))
    series = run_rounds(args, names)
    setup = (
        f"{model_label(args.tiny)}, batch {BATCH}, {args.cycles} cycles x {args.rounds} rounds "
        f"x {args.steps} steps per contender, a fresh process per contender and cycle, "
        f"load {load_start} -> {harness.load_average()}"
    )
    return finish(series, info, setup, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
