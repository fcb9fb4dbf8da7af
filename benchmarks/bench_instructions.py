"""Instructions a DeepSpeed step costs the TRAINING THREAD under ``trainmon.attach``, counted by
valgrind's callgrind: a figure this VM's noise does not move.

Why: the wall-time benchmarks (``bench_attach.py``) resolve about ±15 µs a step on the tiny
model and ±100 µs on the MLP, run to run. What trainmon does inside the step (its wrapped calls,
the phase clock, the timed collectives, the enqueue) is a few tens of microseconds of Python,
below that. Counting instructions is deterministic to about 0.1 %: each contender's process
runs under callgrind with instrumentation off until the timed loop, turns it on for ``--steps``
steps (``callgrind_control -i on``), and off after. Counts are per thread
(``--separate-threads=yes``): the training thread is the first; trainmon's own threads are
reported apart. Two step counts are run per contender and differenced, so what happens once
(the switch-on itself) drops out.

What this cannot show: time. An instruction of the interpreter is cheaper than one of a
cache-missing kernel; a GIL wait or a wake-up is no instruction of the waiting thread; under
valgrind the threads run one at a time, 50 times slower, so the background drains more often
than beside a real step. Read it for what trainmon adds on the training thread, and read the
wall time from ``bench_attach.py``.

Run: ``DS_ACCELERATOR=cpu PYTHONPATH=src .venv/bin/python benchmarks/bench_instructions.py
[--only attach,attach-nothing] [--steps 100,300] [--mlp]`` (valgrind from Debian's
``valgrind`` package; about a minute per contender on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
from deepspeed_bench.contenders import BY_NAME, attach_config, one_rank_engine, train_step

DEFAULT_ONLY = ("attach", "attach-nothing", "attach-writers", "attach-breakdown")
TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)


def child(name: str, steps: int, mlp: bool) -> None:
    """Inside valgrind: build the engine, attach ``name``, count ``steps`` steps."""
    out = Path(tempfile.mkdtemp())
    engine, batches = one_rank_engine(BY_NAME["bare"], out, tiny=not mlp)
    for batch in batches * 3:  # the engine's own first steps
        train_step(engine, batch)
    if BY_NAME[name].attach:
        import trainmon

        trainmon.attach(engine, attach_config(BY_NAME[name], out / name))
    for batch in batches:
        train_step(engine, batch)
    gc.collect()
    control = ["callgrind_control", "-i"]
    subprocess.run([*control, "on", str(os.getpid())], capture_output=True, check=True)
    for i in range(steps):
        train_step(engine, batches[i % len(batches)])
    subprocess.run([*control, "off", str(os.getpid())], capture_output=True, check=True)
    os._exit(0)  # no teardown: nothing after the count matters


def count(name: str, steps: int, mlp: bool, folder: Path) -> dict[int, int]:
    """Instructions per thread (1 = the training thread) of one counted run."""
    prefix = folder / f"{name}.{steps}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={prefix}",
        sys.executable,
        __file__,
        "--child",
        name,
        "--steps",
        str(steps),
        *(["--mlp"] if mlp else []),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    files = sorted(folder.glob(f"{prefix.name}-*"))
    if result.returncode != 0 or not files:
        raise SystemExit(f"{name}: callgrind run failed:\n{result.stderr[-3000:]}")
    threads: dict[int, int] = {}
    for path in files:
        found = TOTALS.findall(path.read_text(errors="replace"))  # the header's summary is 0
        threads[int(path.name.rsplit("-", 1)[1])] = int(found[-1]) if found else 0
    return threads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", default=",".join(DEFAULT_ONLY), help="contenders (+ bare)")
    parser.add_argument("--steps", default="100,300", help="two step counts, differenced")
    parser.add_argument("--mlp", action="store_true", help="the 512-wide MLP, not Linear(16, 16)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, int(args.steps), args.mlp)
        return 0
    low, high = (int(s) for s in args.steps.split(","))
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt-get install valgrind)")
    names = ["bare", *(n for n in args.only.split(",") if n and n != "bare")]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"--only: unknown contenders {unknown}; expected among {sorted(BY_NAME)}")
    info = harness.machine_info(("trainmon", "torch", "deepspeed"))
    print(harness.machine_line(info))
    folder = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    runs = [(name, steps) for name in names for steps in (low, high)]

    def run(name_steps: tuple[str, int]) -> dict[int, int]:
        return count(name_steps[0], name_steps[1], args.mlp, folder)

    with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: counts ignore the load
        counted = dict(zip(runs, pool.map(run, runs), strict=True))
    shutil.rmtree(folder, ignore_errors=True)

    def per_step(name: str, training: bool) -> float:
        """Instructions a step on the training thread (thread 1), or on all the others."""
        totals = [
            sum(v for t, v in counted[(name, s)].items() if (t == 1) == training)
            for s in (low, high)
        ]
        return (totals[1] - totals[0]) / (high - low)

    base = per_step("bare", True)
    base_other = per_step("bare", False)
    model = "4 x Linear(512, 512)" if args.mlp else "Linear(16, 16)"
    print(f"{model}, instructions a step (steps {high} - {low}, differenced)")
    rows = []
    for name in names:
        training, other = per_step(name, True), per_step(name, False)
        rows.append(
            [
                name,
                f"{training / 1e3:,.1f}k",
                "—" if name == "bare" else f"{(training - base) / 1e3:+,.1f}k",
                f"{other / 1e3:,.1f}k",
                "—" if name == "bare" else f"{(other - base_other) / 1e3:+,.1f}k",
            ]
        )
    harness.print_markdown_table(
        [
            "contender",
            "training thread",
            "added on the training thread",
            "other threads",
            "added on other threads",
        ],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
