"""``trainmon.initialize``: the seed's DeepSpeed loop on a plain PyTorch model, read back."""

from __future__ import annotations

import copy
import logging
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

import trainmon
from trainmon.integrations.engine import TrainmonEngine
from trainmon.integrations.engine_setup import EngineUsageError, resolve_batch_sizes

STEP_METRICS = {
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "perf/step_time_ms",
    "perf/samples_per_sec",
    "mem/rss_mb",
    "mem/peak_rss_mb",
}
BREAKDOWN = {"perf/forward_ms", "perf/backward_inner_ms", "perf/optimizer_ms", "perf/comm_ms"}
BREAKDOWN |= {"perf/between_steps_ms"}  # the user's loader: no data wait is claimed


class Regressor(torch.nn.Module):
    """A small MLP whose forward takes ``(x, y)`` and returns the loss, like the seed's model."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
        )
        self.seen_dtype: torch.dtype | None = None
        self.label = "regressor"

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        out = self.body(x)
        self.seen_dtype = out.dtype
        return torch.nn.functional.mse_loss(out.float(), y)


def batches(count: int, size: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed synthetic ``(x, y)`` batches."""
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(size, 8, generator=gen), torch.randn(size, 1, generator=gen))
        for _ in range(count)
    ]


def ds_config(base: Path, **extra: Any) -> dict[str, Any]:
    """A DeepSpeed-style config with a JSONL journal under ``base`` and the console off."""
    config: dict[str, Any] = {
        "steps_per_print": 5,
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
    }
    config.update(extra)
    return config


def journal(base: Path) -> dict[str, dict[int, Any]]:
    """``{metric: {step: value}}`` from the JSONL journal."""
    out: dict[str, dict[int, Any]] = {}
    for record in trainmon.read_journal(base / "job"):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                out.setdefault(name, {})[record["step"]] = value
    return out


def sgd(model: torch.nn.Module, lr: float = 0.05) -> torch.optim.Optimizer:
    """Plain SGD: deterministic and free of host reads in its update."""
    return torch.optim.SGD(model.parameters(), lr=lr)


def train(engine: TrainmonEngine, data: list[Any]) -> None:
    """DeepSpeed's loop: forward, backward and step for every micro-batch."""
    for batch in data:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# ---- the seed loop ------------------------------------------------------------------------------


def test_seed_loop_runs_unchanged_and_logs_every_signal(tmp_path: Path) -> None:
    """The seed's loop runs as written and each step has train/, perf/ and mem/ metrics."""
    net = Regressor()
    data = batches(6, size=8)
    dataloader = torch.utils.data.DataLoader(data, batch_size=None)
    config = ds_config(
        tmp_path,
        train_batch_size=8,
        wall_clock_breakdown=True,
        optimizer={"type": "SGD", "params": {"lr": 0.05}},
    )
    user: dict[int, tuple[float, float, float | None]] = {}

    model, optimizer, _, _ = trainmon.initialize(
        model=net, model_parameters=net.parameters(), config=config
    )
    for step, batch in enumerate(dataloader):
        loss = model(batch)
        model.backward(loss)
        model.step()
        model.monitor.write_events(
            [
                ("train/loss", loss.item()),
                ("train/lr", optimizer.param_groups[0]["lr"]),
                ("train/grad_norm", model.get_global_grad_norm()),
            ]
        )
        user[step + 1] = (
            loss.item(),
            optimizer.param_groups[0]["lr"],
            model.get_global_grad_norm(),
        )
    model.close()

    logged = journal(tmp_path)
    assert set(logged) >= STEP_METRICS | BREAKDOWN
    for name in STEP_METRICS | BREAKDOWN:
        assert sorted(logged[name]) == [1, 2, 3, 4, 5, 6], name
    for step, (loss_value, lr, norm) in user.items():
        assert logged["train/loss"][step] == pytest.approx(loss_value)
        assert logged["train/lr"][step] == lr == 0.05
        assert logged["train/grad_norm"][step] == pytest.approx(norm)
    assert all(v > 0 for v in logged["perf/step_time_ms"].values())
    assert all(v > 0 for v in logged["perf/forward_ms"].values())
    assert set(logged["perf/comm_ms"].values()) == {0.0}
    samples = logged["perf/samples_per_sec"]
    assert all(samples[s] == pytest.approx(8e3 / logged["perf/step_time_ms"][s]) for s in samples)
    assert all(v > 1 for v in logged["mem/rss_mb"].values())
    assert all(
        logged["mem/peak_rss_mb"][s] >= logged["mem/rss_mb"][s] for s in logged["mem/rss_mb"]
    )


def test_loss_is_mean_of_micro_batches_and_grad_norm_matches_plain_torch(tmp_path: Path) -> None:
    """With 2 accumulation steps, train/loss and train/grad_norm equal a plain-torch twin's."""
    net = Regressor()
    twin = copy.deepcopy(net)
    twin_opt = sgd(twin)
    data = batches(8)
    expected_loss, expected_norm = [], []
    for first, second in zip(data[0::2], data[1::2], strict=True):
        losses = []
        for batch in (first, second):
            loss = twin(batch)
            (loss / 2).backward()
            losses.append(loss.item())
        expected_loss.append(sum(losses) / 2)
        grads = [p.grad.flatten() for p in twin.parameters() if p.grad is not None]
        expected_norm.append(torch.cat(grads).norm().item())
        twin_opt.step()
        twin_opt.zero_grad()

    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        boundaries = []
        for batch in data:
            boundaries.append(engine.is_gradient_accumulation_boundary())
            train(engine, [batch])
        assert boundaries == [False, True] * 4
        assert (engine.global_steps, engine.micro_steps, engine.global_samples) == (4, 8, 32)
        engine.monitor.write_events([("user/last", 1.0)])

    logged = journal(tmp_path)
    assert [logged["train/loss"][s] for s in (1, 2, 3, 4)] == pytest.approx(expected_loss, 1e-6)
    assert [logged["train/grad_norm"][s] for s in (1, 2, 3, 4)] == pytest.approx(
        expected_norm, 1e-5
    )
    assert logged["perf/samples_per_sec"][2] == pytest.approx(8e3 / logged["perf/step_time_ms"][2])
    assert logged["user/last"] == {4: 1.0}


@pytest.mark.parametrize(("every", "steps"), [(3, [3, 6]), (0, [])])
def test_grad_norm_every_skips_the_norm_on_other_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int, steps: list[int]
) -> None:
    """``trainmon.grad_norm_every: N`` logs train/grad_norm at multiples of N only, and without
    clipping the norm is not even computed on the other steps (0: never)."""
    import trainmon.integrations.engine as engine_module

    computed = []
    real = engine_module.grad_norm

    def counting(grads: list[Any], uniform: bool) -> Any:
        computed.append(1)
        return real(grads, uniform)

    monkeypatch.setattr(engine_module, "grad_norm", counting)
    net = Regressor()
    config = ds_config(tmp_path, train_batch_size=4, trainmon={"grad_norm_every": every})
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        norms = []
        for batch in batches(7):
            train(engine, [batch])
            norms.append(engine.get_global_grad_norm())
    logged = journal(tmp_path)
    assert sorted(logged.get("train/grad_norm", {})) == steps
    assert sorted(logged["train/loss"]) == [1, 2, 3, 4, 5, 6, 7]
    assert len(computed) == len(steps)
    assert [n is not None for n in norms] == [s + 1 in steps for s in range(7)]


# ---- optimizer, scheduler, batch arithmetic -----------------------------------------------------


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"type": "Adam", "params": {"lr": 0.01}}, torch.optim.AdamW),
        ({"type": "adam", "params": {"lr": 0.01, "adam_w_mode": False}}, torch.optim.Adam),
        ({"type": "ADAMW", "params": {"lr": 0.01, "betas": [0.8, 0.9]}}, torch.optim.AdamW),
        ({"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}, torch.optim.SGD),
    ],
)
def test_optimizer_is_built_from_the_config(
    tmp_path: Path, section: dict[str, Any], expected: type
) -> None:
    """Each DeepSpeed optimizer type (any case) becomes its torch optimizer with its params."""
    net = Regressor()
    engine, optimizer, loader, scheduler = trainmon.initialize(
        model=net, model_parameters=net.parameters(), config=ds_config(tmp_path, optimizer=section)
    )
    with engine:
        assert type(optimizer) is expected
        assert engine.optimizer is optimizer
        assert engine.get_lr() == [0.01]
        assert (loader, scheduler) == (None, None)
        if expected is torch.optim.AdamW and section["type"] == "Adam":
            assert optimizer.param_groups[0]["weight_decay"] == 0.0  # DeepSpeed's default
        train(engine, batches(2))
        assert engine.global_steps == 2


def test_unknown_optimizer_type_lists_the_valid_ones(tmp_path: Path) -> None:
    """An unknown optimizer type is a ConfigError naming the key and the valid types."""
    net = Regressor()
    config = ds_config(tmp_path, optimizer={"type": "Adamm", "params": {"lr": 0.1}})
    with pytest.raises(trainmon.ConfigError, match=r"optimizer\.type.*Adam, AdamW, SGD") as info:
        trainmon.initialize(model=net, config=config)
    assert "did you mean 'Adam'" in str(info.value)


def test_bad_optimizer_params_name_the_section(tmp_path: Path) -> None:
    """Arguments the optimizer rejects are a ConfigError naming optimizer.params."""
    net = Regressor()
    for params in ({"lr": 0.1, "betaz": 1}, {"lr": -1.0}):
        config = ds_config(tmp_path, optimizer={"type": "AdamW", "params": params})
        with pytest.raises(trainmon.ConfigError, match=r"optimizer\.params.*AdamW"):
            trainmon.initialize(model=net, config=config)


def test_missing_optimizer_says_how_to_give_one(tmp_path: Path) -> None:
    """Without an optimizer argument or config section, initialize says how to give one."""
    with pytest.raises(EngineUsageError, match=r"no optimizer.*\"optimizer\""):
        trainmon.initialize(model=Regressor(), config=ds_config(tmp_path))


def test_optimizer_given_twice_is_refused(tmp_path: Path) -> None:
    """An optimizer instance plus a config optimizer section is an error, not a silent choice."""
    net = Regressor()
    config = ds_config(tmp_path, optimizer={"type": "SGD", "params": {"lr": 0.1}})
    with pytest.raises(trainmon.ConfigError, match="keep one"):
        trainmon.initialize(model=net, optimizer=sgd(net), config=config)


def test_unknown_keyword_argument_is_a_type_error(tmp_path: Path) -> None:
    """DeepSpeed's extra keywords are accepted; a misspelt one is a TypeError with a hint."""
    net = Regressor()
    engine, *_ = trainmon.initialize(
        model=net,
        optimizer=sgd(net),
        config=ds_config(tmp_path),
        mpu=None,
        dist_init_required=False,
    )
    engine.close()
    with pytest.raises(TypeError, match="'modle'.*did you mean 'model'"):
        trainmon.initialize(modle=net, config=ds_config(tmp_path))


@pytest.mark.parametrize(
    ("given", "world", "expected"),
    [
        ((64, 8, 4), 2, (64, 8, 4)),
        ((64, 8, None), 2, (64, 8, 4)),
        ((64, None, 4), 2, (64, 8, 4)),
        ((None, 8, 4), 2, (64, 8, 4)),
        ((64, None, None), 2, (64, 32, 1)),
        ((None, 8, None), 2, (16, 8, 1)),
        ((None, None, None), 1, (1, 1, 1)),
        ((None, None, 3), 1, (3, 1, 3)),
    ],
)
def test_batch_numbers_follow_deepspeed_rules(
    given: tuple[int | None, int | None, int | None], world: int, expected: tuple[int, int, int]
) -> None:
    """Any two batch numbers give the third; one alone means one accumulation step."""
    sizes = resolve_batch_sizes(*given, world_size=world)
    assert (
        sizes.train_batch_size,
        sizes.micro_batch_size,
        sizes.gradient_accumulation_steps,
    ) == expected


def test_inconsistent_batch_numbers_show_the_arithmetic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A triple that does not multiply out is a ConfigError showing the product."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    config = ds_config(
        tmp_path,
        train_batch_size=64,
        train_micro_batch_size_per_gpu=8,
        gradient_accumulation_steps=3,
        optimizer={"type": "SGD", "params": {"lr": 0.1}},
    )
    expected = (
        "train_batch_size 64 != train_micro_batch_size_per_gpu 8 * gradient_accumulation_steps 3 "
        "* world_size 2 = 48"
    )
    with pytest.raises(trainmon.ConfigError, match=expected.replace("*", r"\*")):
        trainmon.initialize(model=Regressor(), config=config)


@pytest.mark.parametrize(
    ("given", "text"),
    [
        (
            (64, 6, None),
            "train_batch_size 64 is not a multiple of train_micro_batch_size_per_gpu 6",
        ),
        ((64, None, 3), "train_batch_size 64 is not a multiple of gradient_accumulation_steps 3"),
        (
            (10, None, None),
            "train_batch_size 10 is not a multiple of gradient_accumulation_steps 1",
        ),
        ((4, 8, None), "train_batch_size 4 is not a multiple of train_micro_batch_size_per_gpu 8"),
    ],
)
def test_underivable_batch_numbers_show_the_division(
    given: tuple[int | None, int | None, int | None], text: str
) -> None:
    """A train_batch_size that does not divide evenly is a ConfigError showing the division."""
    with pytest.raises(trainmon.ConfigError, match=text) as info:
        resolve_batch_sizes(*given, world_size=4 if given[0] == 10 else 2)
    assert "world_size" in str(info.value)


def test_scheduler_function_is_stepped_at_each_optimizer_step(tmp_path: Path) -> None:
    """A scheduler function steps once per optimizer step; train/lr is read after it, as in
    DeepSpeed (and as the seed's ``optimizer.param_groups[0]["lr"]`` after ``step()``)."""
    net = Regressor()
    engine, _, _, scheduler = trainmon.initialize(
        model=net,
        optimizer=sgd(net, lr=1.0),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
        config=ds_config(tmp_path, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2),
    )
    with engine:
        assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR)
        train(engine, batches(6))
        assert engine.get_lr() == [0.125]
    assert journal(tmp_path)["train/lr"] == {1: 0.5, 2: 0.25, 3: 0.125}


def test_warmup_scheduler_from_config_matches_deepspeed(tmp_path: Path) -> None:
    """DeepSpeed's WarmupDecayLR (linear) goes min → max over the warm-up, then back down."""
    net = Regressor()
    scheduler_section = {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": 0.0,
            "warmup_max_lr": 0.1,
            "warmup_num_steps": 4,
            "warmup_type": "linear",
            "total_num_steps": 8,
        },
    }
    config = ds_config(
        tmp_path, optimizer={"type": "SGD", "params": {"lr": 1.0}}, scheduler=scheduler_section
    )
    with trainmon.initialize(model=net, config=config)[0] as engine:
        train(engine, batches(8))
    lrs = journal(tmp_path)["train/lr"]
    # logged after each step's scheduler update: the rate of the next step
    assert [lrs[s] for s in range(1, 9)] == pytest.approx(
        [0.025, 0.05, 0.075, 0.1, 0.075, 0.05, 0.025, 0.0]
    )


def test_unknown_scheduler_type_is_a_config_error(tmp_path: Path) -> None:
    """A scheduler type trainmon does not build says to pass lr_scheduler= instead."""
    config = ds_config(
        tmp_path,
        optimizer={"type": "SGD", "params": {"lr": 1.0}},
        scheduler={"type": "OneCycle", "params": {}},
    )
    with pytest.raises(trainmon.ConfigError, match=r"scheduler\.type.*lr_scheduler="):
        trainmon.initialize(model=Regressor(), config=config)


# ---- clipping ----------------------------------------------------------------------------------


def test_gradient_clipping_clips_and_reports_the_norm_before_clipping(tmp_path: Path) -> None:
    """Gradients reach the optimizer clipped to the limit; get_global_grad_norm is pre-clip."""
    net = Regressor()
    optimizer = sgd(net, lr=0.01)
    seen_norms: list[float] = []
    step = optimizer.step

    def checked_step(*args: Any, **kwargs: Any) -> Any:
        grads = [p.grad.flatten() for p in net.parameters() if p.grad is not None]
        seen_norms.append(torch.cat(grads).norm().item())
        return step(*args, **kwargs)

    optimizer.step = checked_step  # type: ignore[method-assign]
    config = ds_config(tmp_path, gradient_clipping=0.01)
    with trainmon.initialize(model=net, optimizer=optimizer, config=config)[0] as engine:
        assert engine.get_global_grad_norm() is None
        reported = []
        for batch in batches(3):
            train(engine, [batch])
            reported.append(engine.get_global_grad_norm())
    assert all(type(norm) is float and norm > 0.01 for norm in reported)
    assert seen_norms == pytest.approx([0.01] * 3, rel=1e-4)
    assert [journal(tmp_path)["train/grad_norm"][s] for s in (1, 2, 3)] == pytest.approx(reported)


# ---- data --------------------------------------------------------------------------------------


class SlowDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sleeps in ``__getitem__``, like a dataset reading from a slow disk."""

    def __init__(self, size: int, sleep_s: float) -> None:
        self.data = batches(1, size=size)[0]
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.data[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.sleep_s)
        return self.data[0][index], self.data[1][index]


def test_training_data_gives_a_timed_loader_of_the_micro_batch(tmp_path: Path) -> None:
    """training_data gives a DataLoader of the micro batch; its waits are perf/data_ms."""
    net = Regressor()
    config = ds_config(
        tmp_path,
        train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=2,
        wall_clock_breakdown=True,
    )
    engine, _, loader, _ = trainmon.initialize(
        model=net, optimizer=sgd(net), training_data=SlowDataset(8, 0.005), config=config
    )
    with engine:
        assert isinstance(loader, torch.utils.data.DataLoader)
        assert isinstance(loader.sampler, torch.utils.data.RandomSampler)
        assert loader.batch_size == 2 and len(loader) == 4
        for batch in loader:
            assert len(batch[0]) == 2
            train(engine, [batch])
        assert engine.global_steps == 2
    logged = journal(tmp_path)
    data_ms = logged["perf/data_ms"]
    # each step waits for 2 micro-batches of 2 samples of 5 ms
    assert set(data_ms) == {1, 2}
    assert all(value >= 20.0 for value in data_ms.values())
    # the loader's waits pause the gap after step(): they are not between-steps time
    assert all(value < 10.0 for value in logged["perf/between_steps_ms"].values())


def test_own_loader_gap_is_between_steps_not_data_wait(tmp_path: Path) -> None:
    """With the user's own loader, the time from step() to the next forward is
    perf/between_steps_ms, and no perf/data_ms is logged (trainmon saw no loader)."""
    net = Regressor()
    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4, wall_clock_breakdown=True)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        for batch in batches(3):
            time.sleep(0.01)
            train(engine, [batch])
    logged = journal(tmp_path)
    between_ms = logged["perf/between_steps_ms"]
    assert between_ms[1] < 10.0  # nothing to compare the first gap with
    assert between_ms[2] >= 10.0 and between_ms[3] >= 10.0
    assert "perf/data_ms" not in logged


# ---- throughput --------------------------------------------------------------------------------


def test_tokens_tflops_and_mfu_with_a_peak(tmp_path: Path) -> None:
    """With tokens, FLOPs and a peak configured, tokens/s, TFLOPS and MFU follow samples/s."""
    net = Regressor()
    throughput = {"tokens_per_sample": 128, "flops_per_sample": 2e9, "peak_tflops": 50.0}
    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4, throughput=throughput)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(3))
    logged = journal(tmp_path)
    for step, samples in logged["perf/samples_per_sec"].items():
        assert logged["perf/tokens_per_sec"][step] == pytest.approx(samples * 128)
        assert logged["perf/tflops"][step] == pytest.approx(samples * 2e9 / 1e12)
        assert logged["perf/mfu"][step] == pytest.approx(samples * 2e9 / 1e12 / 50.0)


def test_no_mfu_without_a_known_peak_on_cpu(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """On the CPU without peak_tflops, TFLOPS are logged and MFU is not, said once in the log."""
    net = Regressor()
    config = ds_config(tmp_path, throughput={"flops_per_sample": 1e9})
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(2))
    logged = journal(tmp_path)
    assert "perf/tflops" in logged
    assert "perf/mfu" not in logged and "perf/tokens_per_sec" not in logged
    notes = [r.getMessage() for r in trainmon_logs if "perf/mfu" in r.getMessage()]
    assert len(notes) == 1 and "throughput.peak_tflops" in notes[0]


# ---- precision ---------------------------------------------------------------------------------


def test_bf16_runs_the_forward_under_autocast_without_a_scaler(tmp_path: Path) -> None:
    """bf16 runs the forward in bfloat16 and logs no loss scale."""
    net = Regressor()
    config = ds_config(tmp_path, bf16={"enabled": True})
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(2))
        assert net.seen_dtype is torch.bfloat16
        assert all(p.dtype is torch.float32 for p in net.parameters())
    logged = journal(tmp_path)
    assert "train/loss_scale" not in logged
    assert all(math.isfinite(v) for v in logged["train/loss"].values())


@pytest.mark.skipif(
    not torch.amp.is_autocast_available("cpu"), reason="this torch has no CPU autocast"
)
def test_fp16_uses_a_grad_scaler_and_logs_its_scale(tmp_path: Path) -> None:
    """fp16 runs the forward in float16 and logs 2**initial_scale_power as train/loss_scale."""
    net = Regressor()
    config = ds_config(tmp_path, fp16={"enabled": True, "initial_scale_power": 8})
    try:
        engine = trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0]
    except trainmon.ConfigError as exc:  # pragma: no cover - depends on the torch build
        pytest.skip(f"fp16 on the CPU is not supported by this torch: {exc}")
    with engine:
        train(engine, batches(3))
        assert net.seen_dtype is torch.float16
    logged = journal(tmp_path)
    assert logged["train/loss_scale"] == {1: 256.0, 2: 256.0, 3: 256.0}
    assert all(math.isfinite(v) for v in logged["train/grad_norm"].values())


def test_fp16_static_loss_scale_stays_fixed(tmp_path: Path) -> None:
    """fp16.loss_scale > 0 is a fixed scale, as in DeepSpeed."""
    net = Regressor()
    config = ds_config(tmp_path, fp16={"enabled": True, "loss_scale": 128})
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(2))
    assert journal(tmp_path)["train/loss_scale"] == {1: 128.0, 2: 128.0}


def test_fp16_and_bf16_together_are_refused(tmp_path: Path) -> None:
    """Enabling fp16 and bf16 at once is a ConfigError, and the engine's monitor is closed."""
    net = Regressor()
    config = ds_config(tmp_path, fp16={"enabled": True}, bf16={"enabled": True})

    def pipelines() -> int:
        return sum(t.name == "trainmon-pipeline" for t in threading.enumerate())

    before = pipelines()
    with pytest.raises(trainmon.ConfigError, match="at most one"):
        trainmon.initialize(model=net, optimizer=sgd(net), config=config)
    assert pipelines() == before


# ---- the training thread stays free ------------------------------------------------------------


class HostReads(TorchFunctionMode):
    """Records tensor→host reads (``.item()``, ``float(t)``, ...) made by one thread."""

    NAMES = frozenset({"item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__"})

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in self.NAMES and threading.get_ident() == self.thread:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def test_training_steps_never_read_tensors_on_the_training_thread(tmp_path: Path) -> None:
    """With every signal on, forward/backward/step call no .item(), .cpu(), .tolist() or float()."""
    net = Regressor()
    config = ds_config(
        tmp_path,
        train_micro_batch_size_per_gpu=4,
        gradient_accumulation_steps=2,
        wall_clock_breakdown=True,
        steps_per_print=1,
        throughput={"tokens_per_sample": 16, "flops_per_sample": 1e6, "peak_tflops": 1.0},
    )
    data = batches(8)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, data[:2])  # warm-up outside the recording
        with HostReads() as reads:
            train(engine, data[2:])
        assert reads.calls == []
        # the recorder does see such reads
        with HostReads() as check:
            float(engine(data[0]).detach())
        assert check.calls == ["__float__"]
    assert set(journal(tmp_path)["train/loss"]) == {1, 2, 3, 4}


def test_fp16_training_thread_reads_only_inside_the_grad_scaler(tmp_path: Path) -> None:
    """With fp16, the loss scale is logged as a tensor: only GradScaler.step itself reads one."""
    net = Regressor()
    config = ds_config(tmp_path, fp16={"enabled": True}, wall_clock_breakdown=True)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(1))
        with HostReads() as reads:
            train(engine, batches(3))
    assert set(reads.calls) <= {"item"} and len(reads.calls) <= 3  # torch's skip-step check


# ---- usage errors and odd values ---------------------------------------------------------------


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[TrainmonEngine]:
    """An engine over a small regressor with SGD and a JSONL journal."""
    net = Regressor()
    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as built:
        yield built


def test_backward_before_forward_says_what_to_do(engine: TrainmonEngine) -> None:
    """backward() without a forward through the engine names the right order."""
    loss = engine.module(batches(1)[0])
    with pytest.raises(EngineUsageError, match=r"before a forward pass.*model\(batch\)"):
        engine.backward(loss)


def test_step_twice_without_backward_says_what_to_do(engine: TrainmonEngine) -> None:
    """step() before any backward, and a second step() without a backward, are refused."""
    with pytest.raises(EngineUsageError, match=r"step\(\) was called before any backward"):
        engine.step()
    train(engine, batches(1))
    with pytest.raises(EngineUsageError, match=r"without a backward\(\) since the previous step"):
        engine.step()
    assert engine.global_steps == 1


def test_non_scalar_loss_names_its_shape(engine: TrainmonEngine) -> None:
    """A per-sample loss names its shape and suggests .mean(); a float names its type."""
    x, y = batches(1)[0]
    engine(batches(1)[0])
    per_sample = (engine.module.body(x) - y) ** 2
    with pytest.raises(EngineUsageError, match=r"shape \(4, 1\).*loss\.mean\(\)"):
        engine.backward(per_sample)
    with pytest.raises(EngineUsageError, match=r"loss is a float"):
        engine.backward(0.5)
    with pytest.raises(EngineUsageError, match="does not require a gradient"):
        engine.backward(torch.tensor(0.5))


def test_nan_loss_is_logged_as_nan(tmp_path: Path) -> None:
    """A NaN loss trains on and is logged as NaN, neither hidden nor raised."""
    net = Regressor()
    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        train(engine, batches(1))
        loss = engine(batches(1)[0]) * float("nan")
        engine.backward(loss)
        engine.step()
    logged = journal(tmp_path)
    assert math.isfinite(logged["train/loss"][1])
    assert math.isnan(logged["train/loss"][2])
    assert math.isnan(logged["train/grad_norm"][2])


# ---- the DeepSpeed surface ---------------------------------------------------------------------


def test_engine_looks_like_deepspeeds(engine: TrainmonEngine) -> None:
    """Accessors, train/eval and attribute fall-through behave like DeepSpeed's engine."""
    assert engine.label == "regressor"  # the module's own attribute
    assert engine.body is engine.module.body
    assert engine.train_batch_size() == 4
    assert engine.train_micro_batch_size_per_gpu() == 4
    assert engine.gradient_accumulation_steps() == 1
    assert engine.eval() is engine and not engine.module.training
    assert engine.train() is engine and engine.module.training
    assert engine.get_global_grad_norm() is None
    assert list(engine.parameters()) == list(engine.module.parameters())
    assert isinstance(engine.monitor, trainmon.Monitor)
    train(engine, batches(1))
    assert engine.was_step_applied() and engine.monitor.step == engine.global_steps == 1
    assert engine.global_samples == 4
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = engine.no_such_thing


def test_evaluation_forward_is_not_timed(tmp_path: Path) -> None:
    """Forwards under torch.no_grad() pass through and do not count as training micro-batches."""
    net = Regressor()
    config = ds_config(tmp_path, train_micro_batch_size_per_gpu=4, wall_clock_breakdown=True)
    with trainmon.initialize(model=net, optimizer=sgd(net), config=config)[0] as engine:
        with torch.no_grad():
            engine(batches(1)[0])
        with pytest.raises(EngineUsageError):
            engine.backward(engine.module(batches(1)[0]))
        train(engine, batches(2))
    assert set(journal(tmp_path)["perf/forward_ms"]) == {1, 2}


def test_a_given_monitor_is_used_and_left_open(tmp_path: Path) -> None:
    """monitor= is used for the automatic metrics and stays open after engine.close()."""
    net = Regressor()
    monitor = trainmon.Monitor(ds_config(tmp_path))
    engine, *_ = trainmon.initialize(
        model=net, optimizer=sgd(net), config={"train_batch_size": 4}, monitor=monitor
    )
    train(engine, batches(1))
    engine.close()
    monitor.write_events([("after/close", 1.0, 5)])
    monitor.close()
    logged = journal(tmp_path)
    assert "train/loss" in logged and logged["after/close"] == {5: 1.0}


def test_comms_logger_feeds_comm_ms_and_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torch.distributed the comms logger's step time is perf/comm_ms; close() ends it."""
    import torch.distributed as dist

    calls: list[str] = []

    class FakeCommsLogger:
        def __init__(self, config: Any, monitor: Any, record_stats: bool) -> None:
            calls.append(f"init record_stats={record_stats}")

        def install(self) -> None:
            calls.append("install")

        def take_step_comm_ms(self) -> float:
            return 1.5

        def log_summary(self) -> None:
            calls.append("log_summary")

        def uninstall(self) -> None:
            calls.append("uninstall")

    fake = type(sys)("trainmon.collect.comms")
    fake.CommsLogger = FakeCommsLogger  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainmon.collect.comms", fake)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        net = Regressor()
        config = ds_config(tmp_path, train_batch_size=4, wall_clock_breakdown=True)
        engine, *_ = trainmon.initialize(model=net, optimizer=sgd(net), config=config)
        train(engine, batches(2))
        engine.close()
    finally:
        dist.destroy_process_group()
    assert calls == ["init record_stats=False", "install", "log_summary", "uninstall"]
    assert journal(tmp_path)["perf/comm_ms"] == {1: 1.5, 2: 1.5}


_DATA_PARALLEL_SCRIPT = """
import sys, torch, torch.distributed as dist, trainmon
rank, store_path, out, base = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
torch.manual_seed(rank)  # different initial weights: the engine broadcasts rank 0's
net = torch.nn.Linear(8, 1)
config = {"train_batch_size": 8, "console": {"enabled": False}, "wall_clock_breakdown": True,
          "jsonl": {"enabled": True, "output_path": base, "job_name": "job"}}
engine, *_ = trainmon.initialize(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                 config=config)
assert engine.train_micro_batch_size_per_gpu() == 4
gen = torch.Generator().manual_seed(100 + rank)  # different data on each rank
for _ in range(3):
    x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
engine.close()
torch.save([p.detach() for p in net.parameters()], out)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_data_parallel_ranks_stay_identical(tmp_path: Path) -> None:
    """Across two gloo ranks, gradients are averaged so both ranks end with the same weights,
    and the all-reduce shows up in perf/comm_ms."""
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(_DATA_PARALLEL_SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(r),
                str(tmp_path / "s"),
                str(tmp_path / f"{r}.pt"),
                str(tmp_path),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    first, second = (torch.load(tmp_path / f"{r}.pt") for r in (0, 1))
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)
    logged = journal(tmp_path)
    assert set(logged["train/loss"]) == {1, 2, 3}
    assert all(value > 0.0 for value in logged["perf/comm_ms"].values())
