"""What ``trainmon.attach`` costs a DeepSpeed step in WALL time, on ONE engine: blocks with
and without trainmon alternate on the same engine, model and tensors.

Why a second DeepSpeed benchmark: ``bench_deepspeed.py`` runs each contender in its own
process, and on the team's VM two identical bare processes step up to ~15 % apart for as long
as they live (their own CPU time too: most likely where their tensors landed in memory). With
ten fresh sets of processes its A/A control still reads ±8 %, so a 2 % goal cannot be shown
there. Here every contender steps the same engine, so that difference is gone: an ``attach``
block attaches trainmon to the engine (untimed), runs ``--warmup`` steps and a flush (untimed),
then the timed block, then detaches (untimed); a bare block runs the same warm-up steps and
the timed block without trainmon. Every block starts after a full ``gc.collect()``: attaching
and detaching make and drop thousands of long-lived objects, whose full collection (~0.1 s in
this process of ~400,000 tracked objects) would otherwise land in whichever block came next,
a cost of attaching once per block that real use pays once per run. ``bare-twin`` is bare
again under another name: the A/A control. Rounds run every contender once, in a shuffled
order.

What a block's time includes is what ``bench_deepspeed.py`` times: ``--steps`` steps and then
``monitor.flush()``, all of it (the background's work during the steps, and its tail drained
by the flush). The default block is 100 steps (about 1 s here), so the flush to the OS that
ends it comes about as often as trainmon's own (``flush_interval_s`` = 1 s). ``steps only``
leaves the flush out. The shape (the issue-25 harness: 4 x Linear(512, 512), batch 32, Adam,
one torch thread, DeepSpeed's default clipping) and the contenders' configs are
``deepspeed_bench.contenders``'; contenders that need another DeepSpeed config (``ds``,
``*-noclip``) cannot share the engine and are refused.

What this cannot show: anything a process gets from starting trainmon once and keeping it
(nothing known); attaching per block re-creates the writers' files, which is outside the timing.

Run: ``DS_ACCELERATOR=cpu PYTHONPATH=src .venv/bin/python benchmarks/bench_attach.py
[--rounds 60] [--steps 100] [--only attach,attach-writers] [--json out.json] [--out DIR]
[--tiny] [--device cuda] [--width 512] [--batch 32]`` (``--out``: where the writers' files
go, e.g. a tmpfs to leave the disk out; ``--device cuda``: the engine on a GPU, where each
block's wall time ends when the device has finished its steps);
``--quick`` is a smoke run (numbers are noise).
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness
from deepspeed_bench.contenders import (
    BATCH,
    BY_NAME,
    CONTENDERS,
    WIDTH,
    Contender,
    attach_config,
    model_label,
    one_rank_engine,
    time_block,
    train_step,
    writers_folder,
)
from deepspeed_bench.report import Series, finish, print_progress

DEFAULT_ONLY = ("bare-twin", "attach", "attach-nothing", "attach-writers")


def shares_the_engine(contender: Contender) -> bool:
    """Whether the contender runs on the bare engine: same DeepSpeed config, bare baseline."""
    bare = BY_NAME["bare"]
    return (
        not contender.ds_monitor
        and contender.clipping == bare.clipping
        and BY_NAME[contender.baseline].ds_monitor == bare.ds_monitor
        and BY_NAME[contender.baseline].clipping == bare.clipping
    )


class OneEngine:
    """The engine every contender steps, and one block of a contender on it."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.engine, batches = one_rank_engine(
            BY_NAME["bare"], out, args.tiny, args.device, args.width, args.batch
        )
        self.sync = None
        if args.device == "cuda":
            import torch

            self.sync = torch.cuda.synchronize
        self.batches = [batches[i % len(batches)] for i in range(args.steps)]
        self.warmup = [batches[i % len(batches)] for i in range(args.warmup)]
        self.out = out
        self.blocks = 0
        for batch in self.batches:  # the engine's own first steps, untimed
            train_step(self.engine, batch)

    def block(self, contender: Contender) -> dict[str, Any]:
        """Attach (for an attach contender), warm up, time one block, detach."""
        import trainmon
        from trainmon.integrations.deepspeed import detach

        self.blocks += 1
        switch = sys.getswitchinterval()
        sys.setswitchinterval(contender.switch_s)
        monitor = None
        folder = None
        if contender.attach:
            folder = writers_folder(contender, self.out)
            monitor = trainmon.attach(self.engine, attach_config(contender, folder))
        try:
            for batch in self.warmup:
                train_step(self.engine, batch)
            if monitor is not None:
                monitor.flush()
            gc.collect()  # attach's own garbage: its full collection must not land in the block
            return time_block(self.engine, self.batches, monitor, self.sync)
        finally:
            if monitor is not None:
                detach(self.engine)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            sys.setswitchinterval(switch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60, help="blocks per contender")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per block")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps after attach")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 rounds of 5 steps")
    parser.add_argument("--tiny", action="store_true", help="Linear(16, 16): the fixed cost")
    parser.add_argument(
        "--only", default=",".join(DEFAULT_ONLY), help="comma-separated contenders (+ bare)"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the engine trains (cuda: NCCL, and each block ends by waiting for the device)",
    )
    parser.add_argument("--width", type=int, default=WIDTH, help="the MLP's width")
    parser.add_argument("--batch", type=int, default=BATCH, help="samples per step")
    parser.add_argument(
        "--order",
        choices=("balanced", "shuffle"),
        default="balanced",
        help=(
            "blocks' order in a round: every permutation once per cycle of rounds (balanced "
            "over whole cycles: 6 rounds for 3 contenders, 24 for 4), or shuffled"
        ),
    )
    parser.add_argument("--json", type=Path, help="write the comparisons here")
    parser.add_argument(
        "--out", type=Path, help="folder the writers write below (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup = 3, 5, 2
    known = [c.name for c in CONTENDERS if shares_the_engine(c)]
    wanted = set(args.only.split(",")) | {"bare"}
    if unknown := wanted - set(known):
        parser.error(
            f"--only: {sorted(unknown)} cannot run on the bare engine (or are unknown); "
            f"these can: {known}"
        )
    wanted |= {BY_NAME[n].baseline for n in wanted}
    names = [n for n in known if n in wanted]
    load_start = harness.load_average()
    info = harness.machine_info(("trainmon", "torch", "deepspeed"))
    out = Path(tempfile.mkdtemp(prefix="bench-attach-", dir=args.out))
    series = {name: Series() for name in names}
    try:
        engine = OneEngine(args, out)

        def block(name: str, _index: int, recorded: bool) -> None:
            answer = engine.block(BY_NAME[name])
            if recorded:
                series[name].add(answer, 0)

        harness.interleaved_rounds(
            names,
            args.rounds,
            block,
            order=args.order,
            rng=random.Random(2),
            warmup_rounds=1,
            progress=print_progress,
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    setup = (
        f"{model_label(args.tiny, args.width)}, batch {args.batch}, on {args.device}, ONE engine, "
        f"{args.rounds} rounds x "
        f"{args.steps} steps per contender (+{args.warmup} untimed after each attach), "
        f"load {load_start} -> {harness.load_average()}"
    )
    return finish(series, info, setup, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
