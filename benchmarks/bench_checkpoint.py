"""What a checkpoint and ``Monitor()`` cost beside slow writers (issue 21).

Each round saves a small model with ``torch.save`` bare, and with trainmon: 5,000 steps of 20
scalars logged first behind two writers that need 50 ms per call, then
``checkpoint_barrier()`` + ``save_monitor_state`` + the same ``torch.save``. Contenders are
interleaved; the figure is the median extra wall time over rounds with a bootstrap 95 %
interval. ``Monitor()`` construction is timed in the same rounds (with the journal and the two
slow writers).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_checkpoint.py [--rounds 7]``
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

import harness
from trainmon import Monitor
from trainmon.integrations.checkpoint import save_monitor_state
from trainmon.testing import SlowWriter

NAMES = [f"m{i}" for i in range(20)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    model = torch.nn.Linear(512, 512)
    bare: list[float] = []
    traced: list[float] = []
    created: list[float] = []

    def run(contender: str, _index: int, recorded: bool) -> None:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder)
            if contender == "bare":
                started = time.perf_counter()
                torch.save(model.state_dict(), out / "model.pt")
                if recorded:
                    bare.append(time.perf_counter() - started)
                return
            started = time.perf_counter()
            monitor = Monitor(
                {
                    "console": {"enabled": False},
                    "jsonl": {"enabled": True, "output_path": str(out), "job_name": "j"},
                    "trainmon": {"close_timeout_s": 0.5},
                },
                writers=[SlowWriter(), SlowWriter()],
            )
            made = time.perf_counter() - started
            for step in range(5000):
                monitor.write_events([(name, float(step), step) for name in NAMES])
            started = time.perf_counter()
            monitor.checkpoint_barrier()
            save_monitor_state(monitor, out / "ckpt")
            torch.save(model.state_dict(), out / "model.pt")
            saved = time.perf_counter() - started
            monitor.close()
            if recorded:
                created.append(made)
                traced.append(saved)

    harness.interleaved_rounds(["bare", "trainmon"], args.rounds, run, warmup_rounds=1)
    rng = random.Random(0)
    extra, interval = harness.paired_difference(traced, bare, rng, 2000)
    made, made_interval = harness.bootstrap_median(created, rng, 2000)
    print(harness.machine_line(harness.machine_info(("trainmon", "torch"))))
    print(f"torch.save alone: median {harness.fmt(sorted(bare)[len(bare) // 2] * 1e3)} ms")
    print(
        f"checkpoint extra (barrier + state + same save - bare save): "
        f"{extra * 1e3:.1f} ms [{interval[0] * 1e3:.1f}, {interval[1] * 1e3:.1f}]"
    )
    print(
        f"Monitor(): {made * 1e3:.1f} ms [{made_interval[0] * 1e3:.1f}, "
        f"{made_interval[1] * 1e3:.1f}]"
    )


if __name__ == "__main__":
    main()
