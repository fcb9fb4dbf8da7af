"""Wall time per step of the real Trainer, Lightning and Accelerate loops with trainmon's
driver, against the same framework without it (issue 25, item 5).

Why: ``bench_integrations.py`` calls each driver's hooks back to back, so a step there has no
GIL-free work and its wall figure is the hooks' CPU plus the background's. Here each framework
trains an MLP whose step spends most of its time in torch kernels (4 x Linear(512, 512) with
ReLU, batch 32, MSE, Adam 1e-3, ``torch.set_num_threads(1)``: about 8 ms a step on the team
VM), as a user's loop would, and the figure is what the user waits.

How: as ``bench_attach.py`` does for DeepSpeed, ONE loop per framework (one model, one
thread, one process) trains through every block, and the driver is attached for a
``trainmon`` block and detached after it. Separate models or threads will not do: each has its
own memory placement, and on the team VM that alone moved a variant by up to 10 %. A block is
``--steps`` steps; its variant is ``bare``, ``bare-twin`` (bare again: the A/A control) or
``trainmon`` (the driver with TensorBoard + CSV + JSONL, the breakdown, windows of 10), in a
shuffled order each round. Before a timed block: the driver attached (untimed, a fresh folder),
5 untimed steps, a flush and a full ``gc.collect()``; the timed block ends with
``monitor.flush()`` inside its timing, so its background work is charged to it; then the
driver is detached (untimed). Overhead: median over rounds of the block's wall time per step
against the bare block of the same round, with a bootstrap 95 % interval; the training
thread's CPU beside it.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_frameworks.py [--frameworks
transformers,lightning,accelerate] [--rounds 40] [--steps 100] [--json out.json]`` (about 3
minutes per framework); ``--quick`` is a smoke run whose numbers are noise.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import harness
from deepspeed_bench.contenders import BATCH, BY_NAME, LAYERS, WIDTH, attach_config, build_model

FRAMEWORKS = ("transformers", "lightning", "accelerate")
VARIANTS = ("bare", "bare-twin", "trainmon")
SETTLE_STEPS = 5  # untimed steps after attaching (the first step builds what is lazy)
#: glibc moves its mmap threshold (and with it the trim threshold) as blocks are freed, so
#: whether a step's large tensors come from fresh pages or reused ones depends on what else
#: the process allocated; fixed thresholds take that out of the comparison
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


#: the driver's ``trainmon`` section (``--trainmon-section``), e.g. ``{"grad_norm_every": 0}``
TRAINMON_SECTION: dict[str, Any] = {}


def trainmon_config(out: Path) -> dict[str, Any]:
    """``bench_attach.py``'s ``attach`` contender (every file writer, the breakdown), with the
    windows of 10 steps DeepSpeed's config gives it there."""
    config = attach_config(BY_NAME["attach"], out)
    config["steps_per_print"] = 10
    config["trainmon"] = {**config.get("trainmon", {}), **TRAINMON_SECTION}
    return config


def mlp() -> torch.nn.Module:
    """The model ``bench_attach.py`` trains, so the two benchmarks' figures compare."""
    model: torch.nn.Module = build_model(tiny=False)
    return model


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


class Driver:
    """How one framework attaches trainmon's driver to its running loop and detaches it;
    ``attach`` returns the driver's monitor."""

    attach: Callable[[Path], Any]
    detach: Callable[[], None]


class Blocks:
    """The schedule, run from the loop's step end (training thread): settle, time, switch."""

    def __init__(self, order: list[tuple[str, bool]], steps: int, out: Path) -> None:
        self.order = order  # (variant, recorded) per block
        self.steps = steps
        self.out = out
        self.driver = Driver()
        self.blocks: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
        self.logged: dict[str, tuple[int, int]] = {name: (0, 0) for name in VARIANTS}
        self._index = -1
        self._count = 0
        self._monitor: Any = None
        self._t0 = self._c0 = 0.0

    def tick(self) -> bool:
        """A step ended; True when the loop must stop (the schedule is done)."""
        self._count += 1
        if self._index >= 0 and self._count == SETTLE_STEPS:
            if self._monitor is not None:
                self._monitor.flush()
            gc.collect()
            self._t0, self._c0 = time.perf_counter(), time.thread_time()
        elif self._index < 0 or self._count == SETTLE_STEPS + self.steps:
            if self._index >= 0:
                self._end_block()
            self._index += 1
            if self._index == len(self.order):
                return True
            self._count = 0
            if self.order[self._index][0] == "trainmon":
                self._monitor = self.driver.attach(self.out / f"block-{self._index}")
        return False

    def _end_block(self) -> None:
        monitor = self._monitor
        if monitor is not None:
            monitor.flush()
        wall, cpu = time.perf_counter() - self._t0, time.thread_time() - self._c0
        name, recorded = self.order[self._index]
        if recorded:
            self.blocks[name].append((1e3 * wall / self.steps, 1e3 * cpu / self.steps))
        if monitor is not None:
            seen, dropped = self.logged[name]
            self.logged[name] = (
                seen + monitor.progress()[1],
                dropped + monitor.dropped_events,
            )
            self.driver.detach()
            self._monitor = None


# ---- the three frameworks: each runs its own loop until the schedule is done ----------------


def run_transformers(blocks: Blocks) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from trainmon.integrations.transformers import TrainmonCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    class Switch(TrainerCallback):
        """Hands every Trainer event to the attached driver, if any."""

        inner: Any = None

    def forwarding(event: str) -> Callable[..., Any]:
        def forward(self: Switch, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.inner is not None:
                return getattr(self.inner, event)(args, state, control, **kwargs)
            return None

        return forward

    for event in [name for name in vars(TrainerCallback) if name.startswith("on_")]:
        setattr(Switch, event, forwarding(event))
    switch = Switch()
    now: dict[str, Any] = {}  # the current step end's arguments, for attaching

    def attach(folder: Path) -> Any:
        driver = TrainmonCallback(trainmon_config(folder))
        driver.on_train_begin(now["args"], now["state"], now["control"], **now["kwargs"])
        switch.inner = driver
        return driver.monitor

    def detach() -> None:
        driver, switch.inner = switch.inner, None
        driver.on_train_end(now["args"], now["state"], now["control"], **now["kwargs"])

    blocks.driver.attach, blocks.driver.detach = attach, detach

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now.update(args=args, state=state, control=control, kwargs=kwargs)
            control.should_training_stop = blocks.tick()

    args = TrainingArguments(
        output_dir=str(blocks.out / "hf"),
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
    Trainer(model=Net(), args=args, train_dataset=Pool(), callbacks=[switch, Clock()]).train()


def run_lightning(blocks: Blocks) -> None:
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

    class Switch(pl.Callback):  # type: ignore[misc]
        """Hands the per-batch hooks the driver uses to the attached driver, if any."""

        inner: Any = None

    def forwarding(hook: str) -> Callable[..., Any]:
        def forward(self: Any, *args: Any) -> None:
            if self.inner is not None:
                getattr(self.inner, hook)(*args)

        return forward

    for hook in (
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_train_batch_end",
    ):
        setattr(Switch, hook, forwarding(hook))
    switch = Switch()
    net = Net()
    trainer_of: list[Any] = []
    logger_of: list[Any] = []

    def attach(folder: Path) -> Any:
        trainer = trainer_of[0]
        logger = TrainmonLogger(trainmon_config(folder))
        driver = TrainmonCallback(logger=logger)
        trainer.loggers = [logger]
        driver.setup(trainer, net, "fit")
        driver.on_train_start(trainer, net)
        switch.inner, logger_of[:] = driver, [logger]
        return driver.monitor

    def detach() -> None:
        trainer = trainer_of[0]
        driver, switch.inner = switch.inner, None
        driver.teardown(trainer, net, "fit")
        logger_of.pop().finalize("success")
        trainer.loggers = []

    blocks.driver.attach, blocks.driver.detach = attach, detach

    class Clock(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            trainer_of[:] = [trainer]
            if blocks.tick():
                trainer.should_stop = True

    trainer = pl.Trainer(
        max_steps=10**7,
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=[switch, Clock()],
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(net, torch.utils.data.DataLoader(Pool(), batch_size=BATCH))


def run_accelerate(blocks: Blocks) -> None:
    from accelerate import Accelerator  # type: ignore[import-untyped]

    from trainmon.integrations.accelerate import TrainmonTracker

    accelerator = Accelerator(cpu=True)
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Pool(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def attach(folder: Path) -> Any:
        tracker = TrainmonTracker(trainmon_config(folder), samples_per_step=BATCH)
        tracker.start()
        accelerator.trackers.append(tracker)
        return tracker.tracker

    def detach() -> None:
        accelerator.trackers.pop().finish()

    blocks.driver.attach, blocks.driver.detach = attach, detach
    for step, batch in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["labels"])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        # with no tracker attached, accelerator.log does nothing: what a bare loop pays
        accelerator.log({"train/loss": loss.detach(), "train/lr": 1e-3}, step=step)
        if blocks.tick():
            break


RUNNERS: dict[str, Callable[[Blocks], None]] = {
    "transformers": run_transformers,
    "lightning": run_lightning,
    "accelerate": run_accelerate,
}


def measure(framework: str, rounds: int, steps: int, warmup: int, seed: int) -> dict[str, Any]:
    """One loop of ``framework`` through every block of the schedule; the blocks' figures."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    order: list[tuple[str, bool]] = []
    harness.interleaved_rounds(
        list(VARIANTS),
        rounds,
        lambda name, _index, recorded: order.append((name, recorded)),
        rng=rng,
        warmup_rounds=warmup,
    )
    out = Path(tempfile.mkdtemp(prefix=f"bench-{framework}-"))
    blocks = Blocks(order, steps, out)
    try:
        RUNNERS[framework](blocks)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    done = sum(len(b) for b in blocks.blocks.values())
    if done != rounds * len(VARIANTS):
        expected = rounds * len(VARIANTS)
        raise SystemExit(f"{framework}: the loop ended after {done} of {expected} blocks")
    return {"blocks": blocks.blocks, "logged": blocks.logged}


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
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=100, help="steps per block (about 1 s)")
    parser.add_argument("--warmup", type=int, default=3, help="rounds not recorded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every block and figure here")
    parser.add_argument(
        "--fixed-malloc",
        action="store_true",
        help="run the workers with glibc's mmap and trim thresholds fixed (see FIXED_MALLOC)",
    )
    parser.add_argument(
        "--trainmon-section",
        type=json.loads,
        default={},
        help='the driver\'s "trainmon" section as JSON, e.g. \'{"grad_norm_every": 0}\'',
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: numbers are noise")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one framework, in this process
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.warmup = 3, 4, 1
    TRAINMON_SECTION.update(args.trainmon_section)
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
        + ("; glibc malloc thresholds fixed" if args.fixed_malloc else "")
        + (
            f"; trainmon section {json.dumps(args.trainmon_section)}"
            if args.trainmon_section
            else ""
        )
    )
    results: dict[str, Any] = {"machine": info, "frameworks": {}}
    for framework in frameworks:
        passed = ["--worker", framework, "--rounds", str(args.rounds), "--steps", str(args.steps)]
        passed += ["--warmup", str(args.warmup), "--seed", str(args.seed)]
        passed += ["--trainmon-section", json.dumps(args.trainmon_section)]
        env = FIXED_MALLOC if args.fixed_malloc else None
        answer = harness.run_worker(__file__, passed, env=env, timeout_s=3600)
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
