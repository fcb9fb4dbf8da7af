"""Wall time per step of the real Trainer, Lightning and Accelerate loops with trainmon's
driver, against the same framework without it (issue 25, item 5).

Why: ``bench_integrations.py`` calls each driver's hooks back to back, so a step there has no
GIL-free work and its wall figure is the hooks' CPU plus the background's. Here each framework
trains an MLP whose step spends most of its time in torch kernels (4 x Linear(512, 512) with
ReLU, batch 32, MSE, Adam 1e-3, ``torch.set_num_threads(1)``: about 8 ms a step on the team
VM), as a user's loop would, and the figure is what the user waits.

How: in one process per framework, each variant (``bare``, ``bare-twin``: the A/A control,
``trainmon``: the driver with TensorBoard + CSV + JSONL, the breakdown, windows of 10) runs its
own framework loop on its own thread, and a conductor hands a baton between them: each round,
in a shuffled order, one variant trains ``--steps`` steps while the others wait at a step
boundary (on an Event: no CPU). So every variant trains the same way, interleaved, with its
monitor alive across blocks as in a real run. A trainmon block ends with ``monitor.flush()``
inside its timing, so that its background work is charged to it and never spills into the
next block. Overhead: median over rounds of the block's wall time per step against the bare
block of the same round, with a bootstrap 95 % interval; the training thread's CPU beside it.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_frameworks.py [--frameworks
transformers,lightning,accelerate] [--rounds 60] [--steps 50] [--json out.json]`` (about 2
minutes per framework); ``--quick`` is a smoke run whose numbers are noise.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import harness

FRAMEWORKS = ("transformers", "lightning", "accelerate")
VARIANTS = ("bare", "bare-twin", "trainmon")
WIDTH, LAYERS, BATCH = 512, 4, 32


def trainmon_config(out: Path, job: str) -> dict[str, Any]:
    """What ``bench_attach.py`` turns on: every file writer, the breakdown, windows of 10."""
    folder = {"output_path": str(out), "job_name": job}
    return {
        "steps_per_print": 10,
        "wall_clock_breakdown": True,
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, **folder},
        "csv_monitor": {"enabled": True, **folder},
        "jsonl": {"enabled": True, **folder},
    }


def mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class Pool(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Endless samples drawn from a small fixed pool: no epoch ends in a measurement."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(8 * BATCH, WIDTH, generator=generator)
        self.y = torch.randn(8 * BATCH, WIDTH, generator=generator)

    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i % len(self.x)], "labels": self.y[i % len(self.y)]}


class Baton:
    """One variant's turn-taking: ``tick()`` at each step end; after ``steps`` steps of a turn
    it records the block, hands the baton back and waits for the next turn (or stops)."""

    def __init__(self, name: str, steps: int) -> None:
        self.name = name
        self.steps = steps
        self.monitor: Any = None  # set once the driver has built it: flushed in the timing
        self.turn = threading.Event()
        self.done = threading.Event()
        self.waiting = threading.Event()  # set once the loop has reached its first step end
        self.stop = False
        self.blocks: list[tuple[float, float]] = []  # (wall ms/step, thread CPU ms/step)
        self.logged = (0, 0)  # the monitor's (events seen, dropped): trainmon did its work
        self._count = -1  # -1: waiting for the first turn
        self._t0 = self._c0 = 0.0

    def tick(self) -> bool:
        """A step ended; True when the loop must stop."""
        if self._count >= 0:
            self._count += 1
            if self._count < self.steps:
                return False
            if self.monitor is not None:
                self.monitor.flush()
                self.logged = (self.monitor.progress()[1], self.monitor.dropped_events)
            wall, cpu = time.perf_counter() - self._t0, time.thread_time() - self._c0
            self.blocks.append((1e3 * wall / self.steps, 1e3 * cpu / self.steps))
            self.done.set()
        self.waiting.set()
        self.turn.wait()
        self.turn.clear()
        self._count = 0
        self._t0, self._c0 = time.perf_counter(), time.thread_time()
        return self.stop


# ---- the three frameworks: each runs its own loop until its baton says stop ------------------


def run_transformers(baton: Baton, out: Path, with_trainmon: bool) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from trainmon.integrations.transformers import TrainmonCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    driver = TrainmonCallback(trainmon_config(out, baton.name)) if with_trainmon else None

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if driver is not None and baton.monitor is None:
                baton.monitor = driver.monitor
            control.should_training_stop = baton.tick()

    args = TrainingArguments(
        output_dir=str(out / baton.name),
        max_steps=10**7,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-3,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callbacks: list[Any] = [Clock(), *([driver] if driver is not None else [])]
    Trainer(model=Net(), args=args, train_dataset=Pool(), callbacks=callbacks).train()


def run_lightning(baton: Baton, out: Path, with_trainmon: bool) -> None:
    from trainmon.integrations.lightning import PACKAGE, TrainmonCallback, TrainmonLogger

    pl: Any = __import__(PACKAGE, fromlist=["Trainer"])

    class Net(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> Any:
            loss = torch.nn.functional.mse_loss(self.net(batch["x"]), batch["labels"])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Clock(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if driver is not None and baton.monitor is None:
                baton.monitor = driver.monitor
            if baton.tick():
                trainer.should_stop = True

    logger = TrainmonLogger(trainmon_config(out, baton.name)) if with_trainmon else None
    driver = TrainmonCallback(logger=logger) if logger is not None else None
    callbacks = [Clock(), *([driver] if driver is not None else [])]
    trainer = pl.Trainer(
        max_steps=10**7,
        accelerator="cpu",
        devices=1,
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    loader = torch.utils.data.DataLoader(Pool(), batch_size=BATCH)
    trainer.fit(Net(), loader)


def run_accelerate(baton: Baton, out: Path, with_trainmon: bool) -> None:
    accelerator = ACCELERATOR[0]  # one per process, with the tracker: bare never logs
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Pool(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if with_trainmon:
        baton.monitor = accelerator.get_tracker("trainmon", unwrap=True)
    for step, batch in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["labels"])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if with_trainmon:
            accelerator.log({"train/loss": loss.detach(), "train/lr": 1e-3}, step=step)
        if baton.tick():
            break


ACCELERATOR: list[Any] = []


def shared_accelerator(out: Path) -> None:
    """Accelerate keeps one state per process: one Accelerator, holding trainmon's tracker,
    serves every variant (only the trainmon variant calls ``accelerator.log``)."""
    from accelerate import Accelerator  # type: ignore[import-untyped]

    from trainmon.integrations.accelerate import TrainmonTracker

    tracker = TrainmonTracker(trainmon_config(out, "trainmon"), samples_per_step=BATCH)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("bench")
    ACCELERATOR.append(accelerator)


RUNNERS: dict[str, Callable[[Baton, Path, bool], None]] = {
    "transformers": run_transformers,
    "lightning": run_lightning,
    "accelerate": run_accelerate,
}


def measure(framework: str, rounds: int, steps: int, warmup: int, seed: int) -> dict[str, Any]:
    """Every variant of one framework, interleaved by the baton; the blocks of each."""
    torch.set_num_threads(1)
    out = Path(tempfile.mkdtemp(prefix=f"bench-{framework}-"))
    batons = {name: Baton(name, steps) for name in VARIANTS}
    threads = [
        threading.Thread(
            target=RUNNERS[framework],
            args=(batons[name], out, name == "trainmon"),
            name=f"train-{name}",
        )
        for name in VARIANTS
    ]
    rng = random.Random(seed)
    if framework == "accelerate":
        shared_accelerator(out)
    try:
        for name, thread in zip(VARIANTS, threads, strict=True):
            thread.start()  # one at a time: each builds its loop and waits after step 1
            while thread.is_alive() and not batons[name].waiting.wait(0.1):
                pass
            if not thread.is_alive():
                raise SystemExit(f"{framework} {name}: the loop ended before its first step")

        def turn(name: str, index: int, recorded: bool) -> None:
            baton = batons[name]
            baton.done.clear()
            baton.turn.set()
            baton.done.wait()
            if not recorded:
                baton.blocks.pop()

        harness.interleaved_rounds(list(VARIANTS), rounds, turn, rng=rng, warmup_rounds=warmup)
    finally:
        for baton in batons.values():
            baton.stop = True
            baton.turn.set()
        for thread in threads:
            thread.join(60)
        for accelerator in ACCELERATOR:
            accelerator.end_training()
        shutil.rmtree(out, ignore_errors=True)
    return {
        "blocks": {name: baton.blocks for name, baton in batons.items()},
        "logged": {name: baton.logged for name, baton in batons.items()},
    }


def report(framework: str, blocks: dict[str, list[list[float]]], seed: int) -> dict[str, Any]:
    """The table of one framework: each variant against bare, wall first, CPU beside it."""
    rng = random.Random(seed)
    bare_wall = [wall for wall, _ in blocks["bare"]]
    bare_cpu = [cpu for _, cpu in blocks["bare"]]
    rows: dict[str, Any] = {"bare_ms": statistics.median(bare_wall)}
    print(f"\n{framework}: bare {rows['bare_ms']:.3f} ms/step, {len(bare_wall)} rounds")
    lines = []
    for name in ("bare-twin", "trainmon"):
        wall = [w for w, _ in blocks[name]]
        cpu = [c for _, c in blocks[name]]
        wall_est = harness.paired_overhead(wall, bare_wall, rng, 2000)
        cpu_est = harness.paired_overhead(cpu, bare_cpu, rng, 2000)
        added = harness.paired_difference(wall, bare_wall, rng, 2000)
        rows[name] = {"wall": wall_est, "cpu": cpu_est, "added_ms": added}
        lines.append(
            (
                name,
                f"{statistics.median(wall):.3f}",
                harness.percent_ci(*wall_est),
                f"{1e3 * added[0]:+.0f} [{1e3 * added[1][0]:+.0f}, {1e3 * added[1][1]:+.0f}]",
                harness.percent_ci(*cpu_est),
            )
        )
    headers = ("variant", "ms/step", "wall vs bare", "µs/step added", "thread CPU vs bare")
    harness.print_markdown_table(headers, lines)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--warmup", type=int, default=3, help="rounds not recorded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every block and figure here")
    parser.add_argument("--quick", action="store_true", help="a smoke run: numbers are noise")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one framework, in this process
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.warmup = 3, 4, 1
    if args.worker:
        harness.emit_result(measure(args.worker, args.rounds, args.steps, args.warmup, args.seed))
        return
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"--frameworks: unknown {unknown}; expected some of {list(FRAMEWORKS)}")
    modules = ("trainmon", "torch", "transformers", "pytorch_lightning", "accelerate")
    info = harness.machine_info(modules)
    print(harness.machine_line(info))
    print(
        f"{args.rounds} rounds x {args.steps} steps per block, {LAYERS} x Linear({WIDTH}, "
        f"{WIDTH}), batch {BATCH}, one torch thread; trainmon: TB + CSV + JSONL + breakdown"
    )
    results: dict[str, Any] = {"machine": info, "frameworks": {}}
    for framework in frameworks:
        passed = ["--worker", framework, "--rounds", str(args.rounds), "--steps", str(args.steps)]
        passed += ["--warmup", str(args.warmup), "--seed", str(args.seed)]
        answer = harness.run_worker(__file__, passed, timeout_s=3600)
        if "error" in answer:
            print(f"\n{framework}: {answer['error']}", file=sys.stderr)
            results["frameworks"][framework] = answer
            continue
        figures = report(framework, answer["blocks"], args.seed)
        results["frameworks"][framework] = {**answer, "figures": figures}
        seen, dropped = answer["logged"]["trainmon"]
        print(
            f"(trainmon took {seen} values, dropped {dropped}; other processes used "
            f"{answer['other_load_pct']:.1f} % of the CPUs meanwhile)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
