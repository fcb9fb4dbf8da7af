"""torchrun entry for ``tests/collect/test_comms.py``: gloo ranks on the CPU run collectives under a
``CommsLogger`` and write down what they saw.

argv: ``outdir``. Three phases, each with its own Monitor (JSONL journal under
``outdir/<phase>/job``, console off) and its own CommsLogger:

* ``all``: prof_all, verbose and debug on;
* ``filtered``: prof_all off, prof_ops ``["all_reduce"]``;
* ``off``: ``enabled: false``.

Each rank writes ``outdir/rank<r>.json`` (stats, summary table, per-step comm ms, which
functions were wrapped, whether uninstall restored them) and ``outdir/log.rank-<r>.txt`` (the
trainmon log lines).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

import trainmon
from trainmon.collect.comms import SUPPORTED_OPS, CommsLogger
from trainmon.config import CommsLoggerConfig
from trainmon.core.values import Deferred

KIB = 256  # float32 elements in 1 KiB
MIB = 256 * 1024  # float32 elements in 1 MiB
ORIGINALS = {op: getattr(dist, op) for op in SUPPORTED_OPS}


def run_steps_all(monitor: trainmon.Monitor, comms: CommsLogger) -> list[float]:
    """Three steps of all_reduce (sync and async), all_gather and barrier."""
    world = dist.get_world_size()
    comm_ms: list[Any] = []
    for step in (1, 2, 3):
        monitor.step = step
        if step == 1:
            for _ in range(3):
                dist.all_reduce(torch.ones(KIB))
            for _ in range(2):
                dist.all_reduce(torch.ones(MIB))
        elif step == 2:
            for _ in range(2):
                gathered = [torch.zeros(KIB) for _ in range(world)]
                dist.all_gather(gathered, torch.ones(KIB))
            work = dist.all_reduce(torch.ones(KIB), async_op=True)
            assert work is not None
            work.wait()
            dist.barrier()
        else:
            dist.all_reduce(torch.ones(MIB))
        comm_ms.append(take_step(monitor, comms))
    return comm_ms


def run_steps_other(monitor: trainmon.Monitor, comms: CommsLogger) -> list[float]:
    """Two steps of two 1 KiB all_reduce and one all_gather each."""
    world = dist.get_world_size()
    comm_ms: list[Any] = []
    for step in (1, 2):
        monitor.step = step
        dist.all_reduce(torch.ones(KIB))
        dist.all_reduce(torch.ones(KIB))
        dist.all_gather([torch.zeros(KIB) for _ in range(world)], torch.ones(KIB))
        comm_ms.append(take_step(monitor, comms))
    return comm_ms


def take_step(monitor: trainmon.Monitor, comms: CommsLogger) -> float:
    """What an engine does at the end of a step: record perf/comm_ms."""
    value = comms.take_step_comm_ms()
    monitor.log({"perf/comm_ms": value})
    resolved = value.resolve() if isinstance(value, Deferred) else value
    assert resolved is not None
    return float(resolved)


def run_phase(out: Path, phase: str, config: CommsLoggerConfig) -> dict[str, Any]:
    """One Monitor + CommsLogger life cycle; returns what this rank observed."""
    monitor = trainmon.Monitor(
        {
            "jsonl": {"enabled": True, "output_path": str(out / phase), "job_name": "job"},
            "console": {"enabled": False},
        }
    )
    comms = CommsLogger(config, monitor, record_stats=config.enabled)
    comms.install()
    comms.install()  # idempotent
    wrapped = {op: getattr(dist, op) is not ORIGINALS[op] for op in SUPPORTED_OPS}
    steps = run_steps_all if phase == "all" else run_steps_other
    comm_ms = steps(monitor, comms)
    summary = comms.log_summary()
    stats = {
        op: {
            str(size): {**dataclasses.asdict(row), "avg_latency_ms": row.avg_latency_ms}
            for size, row in by_size.items()
        }
        for op, by_size in comms.stats().items()
    }
    comms.uninstall()
    comms.uninstall()  # idempotent
    restored = all(
        getattr(dist, op) is ORIGINALS[op] and getattr(distributed_c10d, op) is ORIGINALS[op]
        for op in SUPPORTED_OPS
    )
    monitor.close()
    return {
        "stats": stats,
        "summary": summary,
        "comm_ms": comm_ms,
        "wrapped": wrapped,
        "restored": restored,
    }


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    handler = logging.FileHandler(out / f"log.rank-{rank}.txt", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("trainmon").addHandler(handler)
    phases = {
        "all": CommsLoggerConfig(enabled=True, verbose=True, debug=True),
        "filtered": CommsLoggerConfig(enabled=True, prof_all=False, prof_ops=["all_reduce"]),
        "off": CommsLoggerConfig(enabled=False, verbose=True),
    }
    result: dict[str, Any] = {"world_size": dist.get_world_size()}
    for phase, config in phases.items():
        result[phase] = run_phase(out, phase, config)
        dist.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
