"""Each goodput category holds what it says, under real drivers: the engine's gap after
``step()`` is between-steps time (not data wait) and its loader's waits are data wait;
Lightning's and Accelerate's checkpoint saves and loads, and Lightning's validation, are
journal spans that ``trainmon goodput`` counts; all against sleeps the test injected."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon
from trainmon.cli import main
from trainmon.journal import read_journal

USER_S = 0.02  # the engine loop's own code between step() and the next forward, per step
EVAL_S = 0.3  # one evaluation of the user's, timed with monitor.span("eval")
SAVE_S = 0.2  # a checkpoint save's injected slowness
LOAD_S = 0.15  # each of a checkpoint load's two injected delays


def _config(base: Path, **extra: Any) -> dict[str, Any]:
    """A JSONL journal under ``base``/job, the breakdown on, the console off."""
    return {
        "steps_per_print": 5,
        "wall_clock_breakdown": True,
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
        **extra,
    }


def _goodput(job: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``trainmon goodput JOB --json``, as printed."""
    capsys.readouterr()
    assert main(["goodput", str(job), "--json"]) == 0
    figures: dict[str, Any] = json.loads(capsys.readouterr().out)
    return figures


def _spans(job: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in read_journal(job) if r["kind"] == "span" and r["what"] == kind]


def _inside_the_run(job: Path, spans: list[dict[str, Any]]) -> None:
    """Every span lies between the journal's first line and its last."""
    times = [r["time"] for r in read_journal(job) if "time" in r]
    for span in spans:
        assert min(times) - 1.0 <= span["start_time"] <= span["end_time"] <= max(times), span


# ---- trainmon's engine: data wait vs. the gap after step() ---------------------------------


class _Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.linear(x), y)


class _SlowRows(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows that take ``sleep_s`` each to load; the total slept is kept in ``slept``."""

    def __init__(self, rows: int, sleep_s: float) -> None:
        self.rows, self.sleep_s, self.slept = rows, sleep_s, 0.0

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        started = time.perf_counter()
        time.sleep(self.sleep_s)
        self.slept += time.perf_counter() - started
        return torch.full((8,), index / self.rows), torch.zeros(1)


def _engine_loop(tmp_path: Path, with_loader: bool, **extra: Any) -> tuple[float, float]:
    """Ten steps of the engine; between a step() and the next forward the loop sleeps USER_S
    and, once, evaluates for EVAL_S inside ``monitor.span("eval")``. With ``with_loader`` the
    batches come from the engine's own loader (rows of 5 ms), else from the loop's list.
    ``extra``: more config. Returns (the user code's sleeps between steps, the loader's
    sleeps)."""
    trainmon.mark_start()  # this run's clock starts here, not with the test session
    model = _Regressor()
    rows = _SlowRows(10, 0.005)
    engine, _, loader, _ = trainmon.initialize(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        training_data=rows if with_loader else None,
        config=_config(tmp_path, train_micro_batch_size_per_gpu=1, **extra),
    )
    own = [(torch.randn(1, 8), torch.zeros(1, 1)) for _ in range(10)]
    user = 0.0
    with engine:
        for index, (x, y) in enumerate(loader if with_loader else own):
            if index:  # the user's code after the previous step()
                started = time.perf_counter()
                time.sleep(USER_S)
                user += time.perf_counter() - started
            if index == 5:
                with engine.monitor.span("eval"), torch.no_grad():
                    time.sleep(EVAL_S)
                    engine(x, y)
            engine.backward(engine(x, y))
            engine.step()
    return user, rows.slept if with_loader else 0.0


@pytest.mark.parametrize("with_loader", [False, True], ids=["own-loader", "engine-loader"])
def test_engine_gap_after_step_is_between_steps_and_only_its_loader_is_data_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_loader: bool
) -> None:
    """The engine's gap from step() to the next forward is between_steps_s (less the user's
    timed evaluation, which is eval_s), and data_wait_s is only its own loader's waits."""
    user, loader = _engine_loop(tmp_path, with_loader)
    figures = _goodput(tmp_path / "job", capsys)
    badput = figures["badput"]
    assert badput["between_steps_s"] == pytest.approx(user, rel=0.25, abs=0.02)
    assert badput["eval_s"] == pytest.approx(EVAL_S, rel=0.1)
    if with_loader:  # every row was fetched inside a step (the first step starts with it)
        assert badput["data_wait_s"] == pytest.approx(loader, rel=0.25)
    else:
        assert badput["data_wait_s"] == 0.0
    total = figures["productive_s"] + sum(badput.values())
    assert total == pytest.approx(figures["wall_s"], rel=1e-6)


def test_live_goodput_books_the_gap_after_step_as_trainmon_goodput_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With live goodput on, the last window's trainmon/badput/between_steps and eval shares
    are those ``trainmon goodput`` gives the same run (within half a point): the user's timed
    evaluation inside the gap is counted once, as eval."""
    _engine_loop(tmp_path, False, trainmon={"live_goodput": True})
    last: dict[str, float] = {}
    for record in read_journal(tmp_path / "job"):
        if record["kind"] == "scalars":
            last.update(record["values"])
    figures = _goodput(tmp_path / "job", capsys)
    wall, badput = figures["wall_s"], figures["badput"]
    assert badput["between_steps_s"] / wall > 0.05  # (so half a point is a real bound)
    assert abs(last["trainmon/badput/between_steps"] - badput["between_steps_s"] / wall) <= 0.005
    assert abs(last["trainmon/badput/eval"] - badput["eval_s"] / wall) <= 0.005


# ---- Lightning: checkpoint saves, loads and validation ---------------------------------------


def _lightning_fit(out: Path, ckpt_path: str | None = None) -> Any:
    """Fit 10 steps (to 20 when resuming), validating every 5 (each batch VAL_S) and saving a
    checkpoint every 5 steps through ModelCheckpoint; a callback makes each save SAVE_S slower
    and each load LOAD_S slower twice: restoring its own state (with the module's) and, later,
    the optimizer's."""
    from trainmon.integrations.lightning import PACKAGE, TrainmonCallback, TrainmonLogger

    pl: Any = __import__(PACKAGE, fromlist=["Trainer"])
    checkpointing: Any = __import__(PACKAGE + ".callbacks", fromlist=["ModelCheckpoint"])

    class Net(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, idx: int) -> None:
            time.sleep(VAL_S)

        def configure_optimizers(self) -> Any:
            return SlowSGD(self.parameters(), lr=0.01)

    class Slow(pl.Callback):  # type: ignore[misc]
        def state_dict(self) -> dict[str, Any]:
            return {"slow": True}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            time.sleep(LOAD_S)  # restore_callbacks: inside the load's first span

        def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: Any) -> None:
            time.sleep(SAVE_S)

    class SlowSGD(torch.optim.SGD):
        def load_state_dict(self, state: dict[str, Any]) -> None:
            time.sleep(LOAD_S)  # restore_training_state: inside the load's second span
            super().load_state_dict(state)

    x = torch.randn(160, 8)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:16], x[:16]), batch_size=8)
    logger = TrainmonLogger(_config(out))
    saver = checkpointing.ModelCheckpoint(
        dirpath=str(out / "ckpt"), every_n_train_steps=5, save_top_k=-1, save_last=False
    )
    trainer = pl.Trainer(
        max_steps=10 if ckpt_path is None else 20,
        accelerator="cpu",
        logger=logger,
        callbacks=[TrainmonCallback(logger=logger), Slow(), saver],
        val_check_interval=5,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Net(), loader, val, ckpt_path=ckpt_path)
    return trainer


VAL_S = 0.05  # each Lightning validation batch


@pytest.mark.slow
def test_lightning_saves_loads_and_validation_are_goodput_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Lightning fit saving through ModelCheckpoint, then a fit resumed from its last
    checkpoint: each save is a checkpoint_save span of at least its injected delay, the resume
    is checkpoint_load spans holding both load delays, each validation an eval span holding its
    batches' sleeps, and ``trainmon goodput`` counts them."""
    pytest.importorskip("trainmon.integrations.lightning")
    _lightning_fit(tmp_path)
    saved = sorted((tmp_path / "ckpt").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert len(saved) == 2
    trainer = _lightning_fit(tmp_path, str(saved[-1]))
    assert trainer.global_step == 20
    job = tmp_path / "job"
    saves, loads, evals = (_spans(job, k) for k in ("checkpoint_save", "checkpoint_load", "eval"))
    assert len(saves) == 4  # steps 5 and 10, then 15 and 20
    for span in saves:
        assert span["end_time"] - span["start_time"] >= SAVE_S * 0.95, span
    assert len(loads) == 2  # read, module and callbacks; then loops and optimizer
    for span in loads:
        assert span["end_time"] - span["start_time"] >= LOAD_S * 0.95, span
    assert len(evals) == 4  # every 5 steps, 2 batches each
    for span in evals:
        assert span["end_time"] - span["start_time"] >= 2 * VAL_S * 0.95, span
    _inside_the_run(job, saves + loads + evals)
    badput = _goodput(job, capsys)["badput"]
    assert badput["checkpoint_save_s"] >= 4 * SAVE_S * 0.95
    assert badput["checkpoint_load_s"] >= 2 * LOAD_S * 0.95
    assert badput["eval_s"] >= 4 * 2 * VAL_S * 0.95


# ---- Accelerate: save_state and load_state ---------------------------------------------------


@pytest.mark.slow
def test_accelerate_save_state_and_load_state_are_goodput_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Accelerate loop that saves its state at step 5 and loads it back: both calls are
    journal spans (found without any call of the user's beyond ``init_trackers``) of at least
    the delay a registered object injects, and ``trainmon goodput`` counts them."""
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from trainmon.integrations.accelerate import TrainmonTracker

    class SlowState:
        """Registered for checkpointing: its state is slow to take and to restore."""

        def state_dict(self) -> dict[str, Any]:
            time.sleep(SAVE_S)
            return {"slow": True}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            time.sleep(LOAD_S)

    tracker = TrainmonTracker(_config(tmp_path), samples_per_step=8)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny")
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(SlowState())
    for step in range(1, 11):
        loss = torch.nn.functional.mse_loss(model(torch.randn(8, 8)), torch.zeros(8, 1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.log({"train/loss": loss.item()}, step=step)
        if step == 5:
            accelerator.save_state(str(tmp_path / "state"))
            accelerator.load_state(str(tmp_path / "state"))
    accelerator.end_training()
    assert "save_state" not in vars(accelerator)  # end_training gave the methods back
    job = tmp_path / "job"
    (save,) = _spans(job, "checkpoint_save")
    (load,) = _spans(job, "checkpoint_load")
    assert save["end_time"] - save["start_time"] >= SAVE_S * 0.95
    assert load["end_time"] - load["start_time"] >= LOAD_S * 0.95
    assert save["end_time"] <= load["start_time"]
    _inside_the_run(job, [save, load])
    badput = _goodput(job, capsys)["badput"]
    assert badput["checkpoint_save_s"] >= SAVE_S * 0.95
    assert badput["checkpoint_load_s"] >= LOAD_S * 0.95
