"""A run with known sleeps for ``trainmon goodput``: start-up, steps, a checkpoint, a hang.

Usage: goodput_worker.py OUTDIR RUN TOTAL_STEPS SAVE_AT HANG_AT STARTUP_S STEP_S [PRE_S]
It prints ``PROCESS <unix s>`` first, then sleeps PRE_S before it imports torch and trainmon
(a job's start-up before any Monitor exists). RUN 1 starts fresh, a later RUN resumes from
OUTDIR/ckpt. After the Monitor exists it sleeps STARTUP_S (more start-up), then each step
sleeps STEP_S between forward and backward. It saves a checkpoint after step SAVE_AT (0:
never); right after step HANG_AT (0: never) it prints ``HANGING`` and sleeps, with nothing
flushed on purpose, waiting for the test's ``kill -9``. It prints ``BEFORE <unix s>`` before it
creates the engine (and its Monitor), ``MONITOR <unix s>`` once it exists, ``SAVE <seconds>``
and ``LOAD <seconds>`` as it measured them, and ``CLOSED <unix s>`` at the end, for the test to
check goodput against.
"""

from __future__ import annotations

import sys
import time

print(f"PROCESS {time.time()}", flush=True)


def main() -> None:
    if len(sys.argv) > 8:
        time.sleep(float(sys.argv[8]))
    from pathlib import Path

    import torch

    import trainmon

    out = Path(sys.argv[1])
    run, total, save_at, hang_at = (int(a) for a in sys.argv[2:6])
    startup_s, step_s = (float(a) for a in sys.argv[6:8])
    torch.manual_seed(run)
    torch.set_num_threads(1)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "steps_per_print": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "console": {"enabled": False},
        # flushes far apart, drains often: a kill loses what the last drain had not written
        "trainmon": {"flush_interval_s": 30.0, "drain_interval_s": 0.2},
    }
    model = torch.nn.Linear(8, 1)
    print(f"BEFORE {time.time()}", flush=True)
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    print(f"MONITOR {time.time()}", flush=True)
    if run > 1:
        began = time.time()
        engine.load_checkpoint(str(out / "ckpt"))
        print(f"LOAD {time.time() - began}", flush=True)
    time.sleep(startup_s)
    inputs = torch.randn(4, 8)
    while engine.global_steps < total:
        loss = engine(inputs).pow(2).mean()
        time.sleep(step_s)
        engine.backward(loss)
        engine.step()
        step = engine.global_steps
        if step == save_at:
            began = time.time()
            engine.save_checkpoint(str(out / "ckpt"))
            print(f"SAVE {time.time() - began}", flush=True)
        if step == hang_at:
            print(f"HANGING {time.time()}", flush=True)
            time.sleep(600)
    engine.close()
    print(f"CLOSED {time.time()}", flush=True)


if __name__ == "__main__":
    main()
