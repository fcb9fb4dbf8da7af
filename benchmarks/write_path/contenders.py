"""Every way of logging the workload's step that the write-path table compares, by key.

Why here: ``bench_write_path.py`` runs each contender in a fresh worker process by its key,
and the paired ratio and the breakdown reuse some of them; one registry keeps a row's label,
its scalar budget (``slow``: the per-call-heavy libraries get ``--slow-scalars``) and its code
together. Each contender's ``run(steps, folder)`` returns one ``Sample``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from write_path.deepspeed_style import DeepSpeedStyleMonitor
from write_path.workload import (
    DEFAULT_QUEUE_SIZE,
    NAMES,
    PER_STEP,
    ROWS_MASK,
    Sample,
    Unavailable,
    float_rows,
    measure,
    tensor_rows,
    trainmon_config,
)


@dataclass(frozen=True)
class Contender:
    """One row of the table: how to log ``steps`` steps into ``folder`` and time it."""

    key: str
    label: str
    slow: bool  # uses --slow-scalars
    run: Callable[[int, Path], Sample]
    paced: bool = False  # sleeps between steps: only background CPU is meaningful


# ---- the floor and trainmon ----------------------------------------------------------------------


def bench_floor(steps: int, folder: Path) -> Sample:
    """``deque.append((name, value, step))``: what it costs just to hand the numbers over."""
    rows = float_rows()
    queue: deque[tuple[str, float, int]] = deque()

    def loop() -> None:
        append = queue.append
        n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            append((n0, a, s))
            append((n1, b, s))
            append((n2, c, s))
            append((n3, d, s))
            append((n4, e, s))
            append((n5, f, s))
            append((n6, g, s))
            append((n7, h, s))

    def finish() -> int:
        queue.clear()
        return 0

    return measure(steps * PER_STEP, loop, finish)


def trainmon_contender(
    writers: Sequence[str], tensors: bool = False, paced: bool = False
) -> Callable[[int, Path], Sample]:
    """``Monitor.write_events`` of each step's 8 ``(name, value)`` after ``monitor.step = s``,
    with ``writers`` (config sections; none: the pipeline alone), 0-d tensors instead of floats,
    or ``paced``: a sleep of ``BENCH_PACE_MS`` after each step, as a (fast) training loop."""

    def run(steps: int, folder: Path) -> Sample:
        import trainmon

        rows = tensor_rows() if tensors else float_rows()
        queue_size = int(os.environ.get("BENCH_QUEUE_SIZE", str(DEFAULT_QUEUE_SIZE)))
        pace_s = float(os.environ.get("BENCH_PACE_MS", "1.0")) / 1e3
        config = trainmon_config(folder, writers, queue_size)
        monitor = trainmon.Monitor(config, writers=None if writers else [])

        def loop() -> None:
            write = monitor.write_events
            n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
            for s in range(steps):
                a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
                monitor.step = s
                write([(n0, a), (n1, b), (n2, c), (n3, d), (n4, e), (n5, f), (n6, g), (n7, h)])

        def paced_loop() -> None:
            write = monitor.write_events
            sleep = time.sleep
            n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
            for s in range(steps):
                a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
                monitor.step = s
                write([(n0, a), (n1, b), (n2, c), (n3, d), (n4, e), (n5, f), (n6, g), (n7, h)])
                sleep(pace_s)  # the rest of a training step

        def finish() -> int:
            monitor.close()
            return monitor.dropped_events

        return measure(steps * PER_STEP, paced_loop if paced else loop, finish)

    return run


# ---- the libraries users would otherwise log with -----------------------------------------------


def _summary_writer_loop(writer: Any, steps: int) -> Callable[[], None]:
    rows = float_rows()

    def loop() -> None:
        add = writer.add_scalar
        n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            add(n0, a, s)
            add(n1, b, s)
            add(n2, c, s)
            add(n3, d, s)
            add(n4, e, s)
            add(n5, f, s)
            add(n6, g, s)
            add(n7, h, s)

    return loop


def bench_torch_summary_writer(steps: int, folder: Path) -> Sample:
    """``torch.utils.tensorboard.SummaryWriter.add_scalar``, one call per scalar."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise Unavailable(f"torch.utils.tensorboard: {exc}") from exc
    writer = SummaryWriter(log_dir=str(folder / "tb"))

    def finish() -> int:
        writer.close()
        return 0

    return measure(steps * PER_STEP, _summary_writer_loop(writer, steps), finish)


def bench_tensorboardx(steps: int, folder: Path) -> Sample:
    """``tensorboardX.SummaryWriter.add_scalar``, one call per scalar."""
    try:
        from tensorboardX import SummaryWriter  # type: ignore[import-untyped]
    except ImportError as exc:
        raise Unavailable(f"tensorboardX: {exc}") from exc
    writer = SummaryWriter(logdir=str(folder / "tbx"))

    def finish() -> int:
        writer.close()
        return 0

    return measure(steps * PER_STEP, _summary_writer_loop(writer, steps), finish)


def bench_wandb(steps: int, folder: Path) -> Sample:
    """``wandb.log`` of the step's 8 scalars, offline; its ``wandb-core`` process counts in bg."""
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    os.environ["WANDB_DIR"] = str(folder)
    try:
        import wandb

        settings = wandb.Settings(
            console="off",
            silent=True,
            disable_git=True,
            disable_code=True,
            x_disable_stats=True,  # no system-metrics sampler: only the logging path is measured
            x_disable_meta=True,
            x_disable_machine_info=True,
        )
        run = wandb.init(
            mode="offline", dir=str(folder), project="trainmon-bench", settings=settings
        )
    except Exception as exc:
        raise Unavailable(f"wandb.init failed: {type(exc).__name__}: {exc}") from exc
    rows = float_rows()

    def loop() -> None:
        log = wandb.log
        n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            log({n0: a, n1: b, n2: c, n3: d, n4: e, n5: f, n6: g, n7: h}, step=s)

    def finish() -> int:
        run.finish()
        return 0

    return measure(steps * PER_STEP, loop, finish)


def bench_deepspeed_style(steps: int, folder: Path) -> Sample:
    """The copy of DeepSpeed's monitor (TensorBoard + CSV), one ``write_events`` per step."""
    try:
        monitor = DeepSpeedStyleMonitor(folder)
    except ImportError as exc:
        raise Unavailable(f"torch.utils.tensorboard: {exc}") from exc
    rows = float_rows()

    def loop() -> None:
        write = monitor.write_events
        n0, n1, n2, n3, n4, n5, n6, n7 = NAMES
        for s in range(steps):
            a, b, c, d, e, f, g, h = rows[s & ROWS_MASK]
            write(
                [
                    (n0, a, s),
                    (n1, b, s),
                    (n2, c, s),
                    (n3, d, s),
                    (n4, e, s),
                    (n5, f, s),
                    (n6, g, s),
                    (n7, h, s),
                ]
            )

    def finish() -> int:
        monitor.close()
        return 0

    return measure(steps * PER_STEP, loop, finish)


REFERENCE = "trainmon_tb_jsonl"
CONTENDERS: dict[str, Contender] = {
    c.key: c
    for c in (
        Contender("floor", "deque.append (floor)", False, bench_floor),
        Contender(
            REFERENCE, "trainmon TB+JSONL", False, trainmon_contender(("tensorboard", "jsonl"))
        ),
        Contender("trainmon_tb", "trainmon TB only", False, trainmon_contender(("tensorboard",))),
        Contender("trainmon_jsonl", "trainmon JSONL only", False, trainmon_contender(("jsonl",))),
        Contender("trainmon_null", "trainmon no writers (pipeline)", False, trainmon_contender(())),
        Contender(
            "trainmon_tb_csv",
            "trainmon TB+CSV",
            False,
            trainmon_contender(("tensorboard", "csv_monitor")),
        ),
        Contender(
            "trainmon_tensors",
            "trainmon TB+JSONL, 0-d tensors",
            False,
            trainmon_contender(("tensorboard", "jsonl"), tensors=True),
        ),
        Contender(
            "trainmon_tb_jsonl_paced",
            "trainmon TB+JSONL, paced",
            True,
            trainmon_contender(("tensorboard", "jsonl"), paced=True),
            paced=True,
        ),
        Contender(
            "trainmon_tb_paced",
            "trainmon TB only, paced",
            True,
            trainmon_contender(("tensorboard",), paced=True),
            paced=True,
        ),
        Contender(
            "trainmon_jsonl_paced",
            "trainmon JSONL only, paced",
            True,
            trainmon_contender(("jsonl",), paced=True),
            paced=True,
        ),
        Contender("torch_sw", "torch SummaryWriter.add_scalar", True, bench_torch_summary_writer),
        Contender("tbx_sw", "tensorboardX add_scalar", True, bench_tensorboardx),
        Contender("wandb", "wandb.log (offline)", True, bench_wandb),
        Contender("deepspeed_style", "DeepSpeed-style TB+CSV (sync)", True, bench_deepspeed_style),
    )
}


def work_contender(key: str, steps: int, repeats: int, folder: Path) -> dict[str, Any]:
    """In a worker process: one warm-up, then ``repeats`` fresh instances, each timed."""
    contender = CONTENDERS[key]
    try:
        contender.run(max(1, steps // 10), folder / "warmup")
        samples = []
        for i in range(repeats):
            sub = folder / f"r{i}"
            samples.append(asdict(contender.run(steps, sub)))
            shutil.rmtree(sub, ignore_errors=True)
    except Unavailable as exc:
        return {"key": key, "unavailable": str(exc)}
    return {"key": key, "samples": samples}
