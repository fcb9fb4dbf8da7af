"""A small MLP fitted by Lightning with trainmon's logger and callback (one process or CPU ddp).

Usage: lightning_worker.py OUT_DIR DEVICES [stop]. Lightning's CSVLogger runs beside
trainmon's logger as the framework's own record; rank 0 writes ``trainer.callback_metrics``
and the wall time of ``fit`` to OUT_DIR/lightning.json. Each batch's collate sleeps
DATA_SLEEP_S.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from trainmon.integrations.lightning import PACKAGE, TrainmonCallback, TrainmonLogger

pl: Any = __import__(PACKAGE, fromlist=["Trainer"])
CSVLogger: Any = __import__(PACKAGE + ".loggers", fromlist=["CSVLogger"]).CSVLogger
LearningRateMonitor: Any = __import__(PACKAGE + ".callbacks", fromlist=["x"]).LearningRateMonitor

DATA_SLEEP_S = 0.01
NAN_AT = 5  # mode "nan": the weights turn NaN in the step after global_step 5
STEPS = 20
BATCH = 8
VALIDATED_AT: list[float] = []  # the wall time of each validation batch (sanity check included)


class Net(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters({"hidden": 32, "lr": 0.05})
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )

    fail_at: int | None = None

    poison_at: int | None = None

    def training_step(self, batch: Any, idx: int) -> Any:
        if self.global_step == self.poison_at:  # the weights diverge: NaN from here on
            with torch.no_grad():
                for parameter in self.parameters():
                    parameter.fill_(float("nan"))
        if self.global_step == self.fail_at:
            raise RuntimeError(f"failing at step {self.global_step} on purpose")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, idx: int) -> None:
        VALIDATED_AT.append(time.time())
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.97)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def collate(rows: list[Any]) -> Any:
    time.sleep(DATA_SLEEP_S)
    return torch.utils.data.default_collate(rows)


def loader(n: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    return torch.utils.data.DataLoader(data, batch_size=BATCH, collate_fn=collate)


def fit(out: Path, devices: int = 1, mode: str = "plain") -> dict[str, Any]:
    """Fit 20 steps (fewer when an alert stops it); Lightning's own record of the run."""
    torch.manual_seed(0)
    config: dict[str, Any] = {
        "steps_per_print": 5,
        "wall_clock_breakdown": True,
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
    }
    if mode == "nan":
        rule = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
        config["alerts"] = {"rules": [rule], "sinks": []}
    if mode == "stop":
        config["alerts"] = {
            "rules": [
                {
                    "name": "good-enough",
                    "metric": "train_loss",
                    "op": "<",
                    "threshold": 2.0,
                    "action": "stop",
                }
            ],
            "sinks": [],
        }
    if mode == "grad_norm_every":
        config["trainmon"] = {"grad_norm_every": 4}
    logger = TrainmonLogger(config)
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=[logger, CSVLogger(str(out / "csv"), name="lightning", version=0)],
        callbacks=[TrainmonCallback(logger=logger), LearningRateMonitor("step")],
        log_every_n_steps=1,
        val_check_interval=10,
        limit_val_batches=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    net = Net()
    if mode == "fail":
        net.fail_at = 5
    if mode == "nan":
        net.poison_at = NAN_AT
    VALIDATED_AT.clear()
    started = time.perf_counter()
    trainer.fit(net, loader(STEPS * BATCH * devices, 0), loader(2 * BATCH, 1))
    wall_s = time.perf_counter() - started
    return {
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "global_step": trainer.global_step,
        "wall_s": wall_s,
        "rank": trainer.global_rank,
        "hyperparams": logger.hyperparams,
        "validated_at": list(VALIDATED_AT),
    }


def main() -> None:
    out = Path(sys.argv[1])
    record = fit(out, int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "plain")
    if record["rank"] == 0:
        (out / "lightning.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
