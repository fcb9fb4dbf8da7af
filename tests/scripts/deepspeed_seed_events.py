"""The seed's own ``engine.monitor.write_events`` calls after ``trainmon.attach`` (one process).

Usage: deepspeed_seed_events.py OUTDIR. Trains 4 steps of a tiny ZeRO-0 engine with DeepSpeed's
TensorBoard on and ``comms_logger`` off, and after each step writes the seed's ``(name, value)``
pairs and a DeepSpeed-style ``("train/loss", value, global_samples)`` triple. Then a second
engine whose DeepSpeed config has no monitor, with TensorBoard given to ``attach`` only: prints
``engine.monitor.enabled`` and writes one event of the user's through ``engine.monitor``. Last,
the seed's loop for 30 steps with DeepSpeed's ``tensorboard`` and ``csv_monitor`` sections on and
the journal given to ``attach``: the user logs ``train/loss`` (the data loss, while backward
gets it plus a weight penalty, so the user's values differ from trainmon's own), ``train/lr`` and
``train/grad_norm`` after each ``engine.step()``; what the user logged and what backward got go
to ``seed30-user.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import single_rank

single_rank.set_env()  # before deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

import trainmon  # noqa: E402
from trainmon.integrations.deepspeed import detach  # noqa: E402


def tiny_engine(extra: dict[str, Any]) -> Any:
    """A ZeRO-0 engine of a tiny MLP; ``extra`` goes into its DeepSpeed config."""
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 1e-2}},
        **extra,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), config=config
    )
    return engine


def tensorboard_given_to_attach_only(out: Path) -> None:
    """DeepSpeed's monitor stays off, as its config says; trainmon's TensorBoard is on."""
    engine = tiny_engine({})
    tensorboard = {"enabled": True, "output_path": str(out), "job_name": "tb-attach"}
    trainmon.attach(engine, {"console": {"enabled": False}, "tensorboard": tensorboard})
    print(f"attach-only engine.monitor.enabled={engine.monitor.enabled}")
    for _ in range(3):
        engine.backward(engine(torch.randn(4, 8)).pow(2).mean())
        engine.step()
    engine.monitor.write_events([("Eval/loss", 0.5, engine.global_samples)])
    detach(engine)


def seed_loop_thirty_steps(out: Path) -> None:
    """The seed's loop: (name, value) pairs of names trainmon logs too, after every step."""
    sections = {"output_path": str(out), "enabled": True}
    engine = tiny_engine(
        {
            "tensorboard": {**sections, "job_name": "seed30-tb"},
            "csv_monitor": {**sections, "job_name": "seed30-csv"},
        }
    )
    journal = {**sections, "job_name": "seed30-journal"}
    print("--- the seed's loop, 30 steps", file=sys.stderr, flush=True)  # before its log lines
    trainmon.attach(engine, {"console": {"enabled": False}, "jsonl": journal})
    logged: list[float] = []
    backward: list[float] = []
    for step in range(30):
        loss = engine(torch.randn(4, 8)).pow(2).mean()
        penalty = 0.1 * sum(p.pow(2).sum() for p in engine.module.parameters())
        engine.backward(loss + penalty)
        engine.step()
        engine.monitor.write_events(
            [
                ("train/loss", loss.item()),
                ("train/lr", engine.get_lr()[0]),
                ("train/grad_norm", engine.get_global_grad_norm()),
            ]
        )
        logged.append(loss.item())
        backward.append((loss + penalty).item())
        assert engine.global_steps == step + 1
    detach(engine)
    (out / "seed30-user.json").write_text(json.dumps({"loss": logged, "backward": backward}))


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    engine = tiny_engine(
        {"tensorboard": {"enabled": True, "output_path": str(out), "job_name": "tb"}}
    )
    trainmon.attach(engine, {"console": {"enabled": False}})
    for _ in range(4):
        loss = engine(torch.randn(4, 8)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        lr = engine.get_lr()[0]
        engine.monitor.write_events(
            [
                ("train/loss", loss.item()),
                ("train/lr", lr),
                ("train/grad_norm", engine.get_global_grad_norm()),
                ("user/pair_metric", 7.0),
            ]
        )
        engine.monitor.write_events([("train/loss", loss.item(), engine.global_samples)])
        engine.monitor.write_events([("user/by_samples", 1.5, engine.global_samples)])
    detach(engine)
    tensorboard_given_to_attach_only(out)
    seed_loop_thirty_steps(out)


if __name__ == "__main__":
    main()
