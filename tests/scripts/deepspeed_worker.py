"""A real DeepSpeed engine on the CPU with ``trainmon.attach``; records its own ground truth.

Usage: deepspeed_worker.py OUTDIR STAGES [STEPS [alerts]]. Alone (rank 0 of 1) or under torchrun.
For each ZeRO stage in STAGES (comma separated; "00" is stage 0 without gradient clipping) a
fresh tiny model trains STEPS optimizer steps of two micro-batches with DeepSpeed's
TensorBoard, CSV and ``wall_clock_breakdown`` on and trainmon's journal added by ``attach``;
the worker writes what it measured itself (each micro-batch's loss, the learning rate, the
gradient norm, ``global_samples``) to ``OUTDIR/truth-rank<r>.json``. At stage 0 it also saves
a checkpoint, loads it into a new engine and trains two more steps, to show that trainmon's
step continues.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import single_rank

single_rank.set_env()  # before deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402
from trainmon.integrations.deepspeed import detach  # noqa: E402

MICRO = 2
GAS = 2


def ds_config(out: Path, token: str, world: int) -> dict[str, Any]:
    """DeepSpeed's own config: its monitors and breakdown on, as a DeepSpeed user writes it.

    ``token`` is the ZeRO stage; ``"00"`` is stage 0 with ``gradient_clipping: 0`` (DeepSpeed's
    default clips at 1.0)."""
    stage = int(token[0])
    config: dict[str, Any] = {
        "train_batch_size": MICRO * GAS * world,
        "train_micro_batch_size_per_gpu": MICRO,
        "steps_per_print": 2,
        "wall_clock_breakdown": True,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        "scheduler": {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-2, "warmup_num_steps": 4},
        },
        "zero_optimization": {"stage": stage},
        "tensorboard": {"enabled": True, "output_path": str(out), "job_name": f"tb{token}"},
        "csv_monitor": {"enabled": True, "output_path": str(out), "job_name": f"csv{token}"},
    }
    if token == "00":
        config["gradient_clipping"] = 0.0
    return config


def build(out: Path, stage: str, world: int, job: str) -> tuple[Any, trainmon.Monitor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    engine, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), config=ds_config(out, stage, world)
    )
    extra: dict[str, Any] = {"jsonl": {"enabled": True, "output_path": str(out), "job_name": job}}
    if job.startswith("resumed"):  # its own folders: see docs/deepspeed.md on purge markers
        extra["tensorboard"] = {"job_name": job}
        extra["csv_monitor"] = {"job_name": f"{job}-csv"}
    return engine, trainmon.attach(engine, extra)


def train(engine: Any, steps: int, rank: int, token: str, truth: dict[str, list[Any]]) -> None:
    stage = int(token[0])
    gen = torch.Generator().manual_seed(100 * rank + stage + len(truth["losses"]))
    for _ in range(steps):
        losses = []
        norm = None
        for micro in range(GAS):
            x = torch.randn(MICRO, 8, generator=gen)
            loss = engine(x).pow(2).mean() * (1 + rank)
            engine.backward(loss)
            losses.append(float(loss))
            if micro == GAS - 1 and stage == 0:
                grads = [p.grad.reshape(-1) for p in engine.module.parameters()]
                norm = float(torch.linalg.vector_norm(torch.cat(grads)))
            engine.step()
        if stage != 0:
            norm = float(engine.get_global_grad_norm())
        truth["losses"].append(losses)
        truth["lr"].append(engine.get_lr()[0])
        truth["norm"].append(norm)
        truth["samples"].append(int(engine.global_samples))
        truth["steps"].append(int(engine.global_steps))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stages = sys.argv[2].split(",")
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    result: dict[str, Any] = {}
    for stage in stages:
        truth: dict[str, list[Any]] = {k: [] for k in ("losses", "lr", "norm", "samples", "steps")}
        engine, monitor = build(out, stage, world, f"jsonl{stage}")
        train(engine, steps, rank, stage, truth)
        samples = int(engine.global_samples)
        engine.monitor.write_events([("Eval/loss", 0.25 + rank, samples)])
        truth["eval_samples"] = [samples]
        if stage == "0":
            began = time.time()
            engine.save_checkpoint(str(out / "ckpt"))
            truth["save_wall"] = [began, time.time()]
        detach(engine)
        if stage == "0":
            engine, monitor = build(out, stage, world, "resumed0")
            began = time.time()
            engine.load_checkpoint(str(out / "ckpt"))
            truth["load_wall"] = [began, time.time()]
            truth["resumed_at"] = [monitor.step]
            train(engine, 2, rank, stage, truth)
            detach(engine)
        result[stage] = truth
    if "alerts" in sys.argv[4:]:
        result["alerts"] = stop_scenario(out, world, rank)
        result["nan"] = nan_scenario(out, world)
    (out / f"truth-rank{rank}.json").write_text(json.dumps(result))


class StepCounter:
    """A user's callback: the steps ``on_step_end`` saw."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step_end(self, engine: Any, step: int) -> None:
        self.steps.append(step)


def stop_scenario(out: Path, world: int, rank: int) -> dict[str, Any]:
    """A stop rule that fires on the first loss: training stops by itself, and a checkpoint
    saved afterwards is refused."""
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 1)
    engine, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), config=ds_config(out, "0", world)
    )
    rule = {"name": "any-loss", "metric": "train/loss", "op": ">", "threshold": -1.0}
    monitor = trainmon.attach(
        engine,
        {
            "tensorboard": {"job_name": "alerts-tb"},
            "csv_monitor": {"job_name": "alerts-csv"},
            "alerts": {"rules": [{**rule, "action": "stop"}], "sinks": [{"type": "console"}]},
        },
    )
    counter = StepCounter()
    monitor.add_callback(counter)
    stopped_at = None
    for _ in range(500):
        try:
            for _ in range(GAS):
                engine.backward(engine(torch.randn(MICRO, 8)).pow(2).mean())
                engine.step()
        except trainmon.TrainingStopped:
            stopped_at = int(engine.global_steps)
            break
        time.sleep(0.01)
    try:
        engine.save_checkpoint(str(out / "refused"))
        refused = False
    except trainmon.TrainingStopped:
        refused = True
    detach(engine)
    return {"stopped_at": [stopped_at], "callback_steps": counter.steps, "refused": [refused]}


NAN_AT = 5  # nan_scenario: the weights turn NaN after this step


def nan_scenario(out: Path, world: int) -> dict[str, Any]:
    """The weights turn NaN after step NAN_AT; a non_finite stop rule on train/loss (the loss
    tensor each backward gets, judged in the background) stops training."""
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 1)
    engine, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), config=ds_config(out, "0", world)
    )
    rule = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
    trainmon.attach(
        engine,
        {
            "tensorboard": {"job_name": "nan-tb"},
            "csv_monitor": {"job_name": "nan-csv"},
            "jsonl": {"enabled": True, "output_path": str(out), "job_name": "nan-jsonl"},
            "alerts": {"rules": [rule], "sinks": []},
        },
    )
    stopped_at = None
    for _ in range(100):
        try:
            for _ in range(GAS):
                engine.backward(engine(torch.randn(MICRO, 8)).pow(2).mean())
                engine.step()
        except trainmon.TrainingStopped:
            stopped_at = int(engine.global_steps)
            break
        if int(engine.global_steps) == NAN_AT:
            with torch.no_grad():
                for parameter in net.parameters():
                    parameter.fill_(float("nan"))
        time.sleep(0.01)
    detach(engine)
    return {"stopped_at": [stopped_at]}


if __name__ == "__main__":
    main()
