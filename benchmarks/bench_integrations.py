"""What each framework driver costs the training thread per optimizer step.

Why: the drivers promise the framework's own step cost plus a few microseconds (goal: at most
20 µs per step for each callback). The frameworks' loops are far noisier than that on a
shared 2-core VM, so each driver's hooks are called directly, in the order and with the
arguments its framework uses, on real framework objects where they are cheap to build (the
Trainer's ``TrainingArguments``/``TrainerState``/``TrainerControl``, a real tiny module whose
forward runs the Trainer driver's forward hooks), and compared with the same loop without the
driver, interleaved round by round in one process (medians of paired differences).

Per step:

* ``transformers``: ``on_step_begin``, one training forward of a ``Linear(4, 4)`` (the
  driver's forward hooks), ``on_pre_optimizer_step``, ``on_step_end`` (the step's metrics, one
  enqueue) and ``on_log`` with the Trainer's per-step logs (``logging_steps=1``: loss,
  grad_norm, learning_rate, epoch); ``wall_clock_breakdown`` on.
* ``lightning``: ``on_train_batch_start`` (batch size of a ``(8, 4)`` tensor),
  ``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step`` (the global
  gradient norm of the module's two gradients: foreach kernels, no sync),
  ``on_train_batch_end``, and ``TrainmonLogger.log_metrics`` with one ``self.log`` value;
  breakdown on.
* ``(grad norm)``: the Lightning row's gradient norm alone (``grad_norm``: one foreach
  kernel, combined in the background), the part of that row a user who logs a gradient norm
  pays anyway.
* ``accelerate``: ``accelerator.log``'s call of ``TrainmonTracker.log`` with two values and a
  new step (closes a step of the instrument).

The monitor writes a JSONL journal (console off); its background thread runs meanwhile, as in
training. The headline is wall time per step (``perf_counter_ns``: what a user waits, GIL waits
included); the training thread's CPU time (``thread_time_ns``, which other processes of a
shared machine do not move) is beside it, and so is the background's CPU per driven step
(process CPU minus the training thread's over the whole measurement, ``close()`` included, so
no drain is left out whichever block it fell in). The CPU median leaves out the rounds in which
a full garbage collection ran (one every few thousand steps here, about 0.1 s, mostly on the
training thread, made by the queued values that outlive young collections); the CPU mean over
rounds keeps them.

By default a step has no GIL-free work: the hooks run back to back, so the background's work
for earlier steps takes the GIL from them and the wall figure is about the hooks' CPU plus the
background's. A real step spends most of its time in torch kernels that release the GIL, where
the background overlaps it; ``--gil-free-us N`` gives both loops that: before each step,
``hashlib.sha256`` of a block sized to take about N µs (C code that releases the GIL and keeps
the training thread's core busy, as a CPU kernel does). The driver's figures are still driven
− bare, so the N µs cancel out.

Each round times one block of ``--steps`` steps of the bare loop and one of the driven loop
(``harness.per_call_us`` on the thread-CPU clock, step numbers running on across rounds, the
order alternating), after two unrecorded warm-up rounds; the figure is the median over rounds
of driven − bare, with a bootstrap 95 % interval.

Run: ``.venv/bin/python benchmarks/bench_integrations.py [--steps 2000] [--rounds 15]``;
``--quick`` is a smoke run (numbers are noise).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

import harness

BOOTSTRAP_RESAMPLES = 2000
WARMUP_ROUNDS = 2  # first enqueues, lazy imports


def config(base: Path, name: str) -> dict[str, Any]:
    return {
        "steps_per_print": 10,
        "wall_clock_breakdown": True,
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": name},
        "console": {"enabled": False},
    }


def transformers_driver(base: Path) -> tuple[Callable[[int], None], Callable[[int], None], Any]:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from trainmon.integrations.transformers import TrainmonCallback

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    args = TrainingArguments(output_dir=str(base / "hf"), use_cpu=True, report_to=[])
    state, control = TrainerState(), TrainerControl()
    callback = TrainmonCallback(config(base, "hf"))
    callback.on_train_begin(args, state, control, model=model)
    logs = {"loss": 1.5, "grad_norm": 0.7, "learning_rate": 1e-3, "epoch": 0.1}

    def bare(step: int) -> None:
        model(x)

    def driven(step: int) -> None:
        state.global_step = step
        callback.on_step_begin(args, state, control)
        model(x)
        callback.on_pre_optimizer_step(args, state, control)
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs=dict(logs))

    def close() -> None:
        callback.on_train_end(args, state, control)

    return bare, driven, close


def lightning_driver(base: Path) -> tuple[Callable[[int], None], Callable[[int], None], Any]:
    from trainmon.integrations.lightning import TrainmonCallback, TrainmonLogger

    module = torch.nn.Linear(4, 4)
    for p in module.parameters():
        p.grad = torch.randn_like(p)
    batch = torch.randn(8, 4)
    outputs = {"loss": torch.tensor(0.5)}
    logger = TrainmonLogger(config(base, "pl"))
    callback = TrainmonCallback(logger=logger)
    trainer = SimpleNamespace(
        global_step=0, loggers=[logger], should_stop=False, accumulate_grad_batches=1
    )
    callback.setup(trainer, module, "fit")
    callback.on_train_start(trainer, module)

    def bare(step: int) -> None:
        trainer.global_step = step

    def driven(step: int) -> None:
        callback.on_train_batch_start(trainer, module, batch, step)
        callback.on_before_backward(trainer, module, outputs["loss"])
        callback.on_after_backward(trainer, module)
        callback.on_before_optimizer_step(trainer, module, None)
        trainer.global_step = step
        callback.on_train_batch_end(trainer, module, outputs, batch, step)
        logger.log_metrics({"train_loss": 0.5}, step - 1)

    def close() -> None:
        callback.teardown(trainer, module, "fit")
        logger.finalize("success")

    return bare, driven, close


def accelerate_driver(base: Path) -> tuple[Callable[[int], None], Callable[[int], None], Any]:
    from trainmon.integrations.accelerate import TrainmonTracker

    tracker = TrainmonTracker(config(base, "acc"), samples_per_step=8)
    tracker.start()

    def bare(step: int) -> None:
        pass

    def driven(step: int) -> None:
        tracker.log({"train/loss": 0.5, "train/lr": 1e-3}, step=step)

    return bare, driven, tracker.finish


def grad_norm_alone(base: Path) -> tuple[Callable[[int], None], Callable[[int], None], Any]:
    """The Lightning row's gradient norm by itself (the part a user logging it pays anyway)."""
    from trainmon.collect.instrument import grad_norm

    module = torch.nn.Linear(4, 4)
    grads = [torch.randn_like(p) for p in module.parameters()]

    def bare(step: int) -> None:
        pass

    def driven(step: int) -> None:
        grad_norm(grads, True)

    return bare, driven, lambda: None


def gil_free_work(us: float) -> Callable[[], None]:
    """A call that takes about ``us`` µs in C with the GIL released (sha256 of a block sized by
    a quick calibration): the part of a step that torch kernels run without the GIL."""
    probe = bytes(1 << 20)
    start = time.perf_counter()
    for _ in range(5):
        hashlib.sha256(probe).digest()
    bytes_per_us = 5 * len(probe) / ((time.perf_counter() - start) * 1e6)
    # hashlib releases the GIL for inputs above 2 KiB
    block = bytes(max(4096, int(us * bytes_per_us)))

    def work() -> None:
        hashlib.sha256(block).digest()

    return work


def with_work(loop: Callable[[int], None], work: Callable[[], None]) -> Callable[[int], None]:
    """``loop`` after ``work`` (the step's GIL-free part)."""

    def step(index: int) -> None:
        work()
        loop(index)

    return step


def measure(
    build: Any, base: Path, steps: int, rounds: int, gil_free_us: float = 0.0
) -> dict[str, Any]:
    """Paired rounds of the bare and the driven loop: wall and thread-CPU µs per step of each,
    and the driver's cost on each clock (median of the per-round differences, bootstrap 95 %
    interval). Wall time includes waiting for the GIL while the monitor's threads run; the
    background's CPU per driven step is the process's CPU beyond the training thread's, from
    before the build to after ``close()``, over every driven step (warm-up included)."""
    loops: dict[str, Callable[[int], None]]
    process0, thread0 = time.process_time_ns(), time.thread_time_ns()
    bare, driven, close = build(base)
    if gil_free_us > 0:
        work = gil_free_work(gil_free_us)
        bare, driven = with_work(bare, work), with_work(driven, work)
    loops = {"bare": bare, "driven": driven}
    wall: dict[str, list[float]] = {"bare": [], "driven": []}
    cpu: dict[str, list[float]] = {"bare": [], "driven": []}

    def block(which: str, index: int, recorded: bool) -> None:
        # both loops of a round see the same step numbers; they only grow across rounds
        first = 1 + index * steps
        loop = loops[which]
        wall0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
        for step in range(first, first + steps):
            loop(step)
        cpu1, wall1 = time.thread_time_ns(), time.perf_counter_ns()
        if recorded:
            wall[which].append((wall1 - wall0) / steps / 1e3)
            cpu[which].append((cpu1 - cpu0) / steps / 1e3)

    harness.interleaved_rounds(
        ("bare", "driven"), rounds, block, order="alternate", warmup_rounds=WARMUP_ROUNDS
    )
    close()
    background_ns = (time.process_time_ns() - process0) - (time.thread_time_ns() - thread0)
    got: dict[str, Any] = {
        "bare_us": statistics.median(wall["bare"]),
        "background_us": background_ns / ((rounds + WARMUP_ROUNDS) * steps) / 1e3,
    }
    for clock, us in (("wall", wall), ("cpu", cpu)):
        cost, interval = harness.paired_difference(
            us["driven"], us["bare"], random.Random(0), BOOTSTRAP_RESAMPLES
        )
        got[f"{clock}_us"], got[f"{clock}_ci_us"] = cost, interval
    # the mean keeps the rounds a full garbage collection fell in (the median drops them)
    got["cpu_mean_us"] = statistics.fmean(cpu["driven"]) - statistics.fmean(cpu["bare"])
    return got


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--gil-free-us",
        type=float,
        default=0.0,
        help="GIL-free C work per step in both loops, µs (default 0: the hooks back to back)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 steps, 3 rounds")
    options = parser.parse_args(argv)
    if options.quick:
        options.steps, options.rounds = 200, 3
    torch.set_num_threads(1)
    drivers = {
        "transformers": transformers_driver,
        "lightning": lightning_driver,
        "accelerate": accelerate_driver,
        "  (grad norm)": grad_norm_alone,
    }
    info = harness.machine_info(("trainmon", "torch", "transformers", "pytorch_lightning"))
    print(harness.machine_line(info))
    print(
        f"training-thread time per step, {options.rounds} rounds x {options.steps} steps, "
        f"median of paired rounds: wall (perf_counter) and CPU (thread_time); "
        f"GIL-free work per step: {options.gil_free_us:g} µs"
    )
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in drivers.items():
            got = measure(build, Path(tmp), options.steps, options.rounds, options.gil_free_us)
            (wall_low, wall_high), (cpu_low, cpu_high) = got["wall_ci_us"], got["cpu_ci_us"]
            lines.append(
                (
                    name,
                    f"{got['wall_us']:.1f}",
                    f"[{wall_low:.1f}, {wall_high:.1f}]",
                    f"{got['cpu_us']:.1f}",
                    f"[{cpu_low:.1f}, {cpu_high:.1f}]",
                    f"{got['cpu_mean_us']:.1f}",
                    f"{got['background_us']:.1f}",
                    f"{got['bare_us']:.1f}",
                )
            )
    harness.print_markdown_table(
        (
            "driver",
            "wall µs/step (driver)",
            "95% CI",
            "CPU µs/step (driver)",
            "95% CI",
            "CPU mean",
            "background CPU µs/step",
            "wall µs/step (bare)",
        ),
        lines,
    )
    if warning := harness.busy_warning(info):
        print(warning)


if __name__ == "__main__":
    main()
