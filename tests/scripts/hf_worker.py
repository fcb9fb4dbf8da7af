"""A tiny GPT-2 trained by the Hugging Face Trainer with trainmon's callback (one rank or torchrun).

Usage: hf_worker.py OUT_DIR [stop]. Writes the Trainer's ``state.log_history`` and the wall
time of ``trainer.train()`` to OUT_DIR/hf.json (rank 0); trainmon writes under OUT_DIR.
The collator sleeps DATA_SLEEP_S per micro-batch: the data wait the test expects to see.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from trainmon.integrations.transformers import TrainmonCallback

DATA_SLEEP_S = 0.01
STEPS = 20
MICRO = 4
GAS = 2


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, seed: int) -> None:
        self.ids = torch.randint(0, 128, (n, 16), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


COLLATES = [0]  # collate calls so far: the test's own count of data sleeps
COLLATED_AT: list[float] = []  # the wall time of each collate call (evaluation's included)


def collate(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    COLLATES[0] += 1
    COLLATED_AT.append(time.time())
    time.sleep(DATA_SLEEP_S)
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


class CountSleeps(TrainerCallback):  # type: ignore[misc]
    """Counts the collate sleeps in each step's data window: since the previous step's end or
    the end of an evaluation, up to the step's begin (accelerate's loader fetches one batch
    ahead, and evaluation collates too, so it is not always the accumulation count)."""

    def __init__(self) -> None:
        self.sleeps: dict[int, int] = {}
        self._mark = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.sleeps[state.global_step + 1] = COLLATES[0] - self._mark

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = COLLATES[0]

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = COLLATES[0]


NAN_AT = 5  # mode "nan": the weights become NaN after this step


class PoisonAt(TrainerCallback):  # type: ignore[misc]
    """Turns every weight NaN at the end of one step, as a diverging run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            with torch.no_grad():
                for parameter in kwargs["model"].parameters():
                    parameter.fill_(float("nan"))


def train(out: Path, mode: str = "plain") -> dict[str, Any]:
    """Train 20 steps (fewer when an alert stops it); the Trainer's own record of the run."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    config = {
        "steps_per_print": 5,
        "wall_clock_breakdown": True,
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
    }
    if mode == "nan":
        config["alerts"] = {
            "rules": [
                {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
            ],
            "sinks": [],
        }
    if mode == "stop":
        config["alerts"] = {
            "rules": [
                {
                    "name": "half-way",
                    "metric": "train/epoch",
                    "op": ">",
                    "threshold": 0.5,
                    "action": "stop",
                }
            ],
            "sinks": [],
        }
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=16)
    )
    args = TrainingArguments(
        output_dir=str(out / "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=MICRO,
        per_device_eval_batch_size=MICRO,
        gradient_accumulation_steps=GAS,
        learning_rate=1e-3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=10,
        save_strategy="steps",
        save_steps=STEPS,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        **({"ddp_backend": "gloo"} if world > 1 else {}),
    )
    callback = TrainmonCallback(config)
    sleeps = CountSleeps()
    extra = [PoisonAt(NAN_AT)] if mode == "nan" else []
    COLLATES[0] = 0
    COLLATED_AT.clear()
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(STEPS * MICRO * GAS * world, 0),
        eval_dataset=Tokens(8, 1),
        data_collator=collate,
        callbacks=[sleeps, callback, *extra],
    )
    started = time.perf_counter()
    trainer.train()
    wall_s = time.perf_counter() - started
    return {
        "log_history": trainer.state.log_history,
        "global_step": trainer.state.global_step,
        "wall_s": wall_s,
        "sleeps": sleeps.sleeps,
        "collated_at": list(COLLATED_AT),
    }


def main() -> None:
    out = Path(sys.argv[1])
    record = train(out, sys.argv[2] if len(sys.argv) > 2 else "plain")
    if int(os.environ.get("RANK", "0")) == 0:
        (out / "hf.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
