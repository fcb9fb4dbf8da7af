"""trainmon's CUDA paths on a real GPU: no waits on the training thread, device-time breakdown,
CUDA memory counters, tensor values read in the background, NVML figures.

Skipped without a CUDA device (CI has none). Each test steps a model heavy enough that the
device runs milliseconds behind the host, so a host timer or a premature read would show:
a host-timed forward reads tens of microseconds where the device took milliseconds, and a
value read before its kernel finished is wrong. Waits are counted per thread and call site
with torch's sync debug mode ("warn") plus counters on ``Event.synchronize``,
``Stream.synchronize`` and ``torch.cuda.synchronize`` (the debug mode does not cover event
waits), always against the same loop without trainmon.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

WIDTH = 4096  # fp32 4096^3 matmuls: milliseconds of device time per layer
LAYERS = 3
STEPS = 12
WARMUP = 3
MIB = 1024 * 1024
SYNC_WARNING = "synchronizing CUDA operation"


class Waits:
    """Calls that made the host wait for the device, by thread and by call site."""

    def __init__(self) -> None:
        self.by_thread: Counter[str] = Counter()
        self.sites: Counter[tuple[str, str]] = Counter()

    def note(self) -> None:
        thread = threading.current_thread().name
        frames = [
            f
            for f in traceback.extract_stack()
            if "/torch/" not in f.filename
            and not f.filename.endswith("warnings.py")
            and not (f.filename == __file__ and f.name in HELPERS)
        ]
        # the innermost frames: the same call reads alike with or without trainmon's wrappers
        site = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-1:-4:-1])
        self.by_thread[thread] += 1
        self.sites[thread, site] += 1

    def added(self, bare: Waits, thread: str) -> dict[str, int]:
        """The call sites on ``thread`` that waited more often here than in ``bare``."""
        mine = Counter({s: n for (t, s), n in self.sites.items() if t == thread})
        theirs = Counter({s: n for (t, s), n in bare.sites.items() if t == thread})
        return dict(mine - theirs)


HELPERS = {"note", "wrapper", "show"}


@contextmanager
def waits_by_thread() -> Iterator[Waits]:
    """Counts each call that makes the host wait for the device, with its thread and site."""
    seen = Waits()

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen.note()
            return method(*args, **kwargs)

        return wrapper

    patched = [
        (torch.cuda.Event, "synchronize"),
        (torch.cuda.Stream, "synchronize"),
        (torch.cuda, "synchronize"),
    ]
    originals = [getattr(owner, name) for owner, name in patched]
    shown = warnings.showwarning

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if SYNC_WARNING in str(message):
            seen.note()
        else:
            shown(message, category, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        for (owner, name), original in zip(patched, originals, strict=True):
            setattr(owner, name, counted(original))
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield seen
        finally:
            torch.cuda.set_sync_debug_mode("default")
            for (owner, name), original in zip(patched, originals, strict=True):
                setattr(owner, name, original)


class HeavyRegressor(torch.nn.Module):
    """Takes ``(x, y)`` and returns the MSE loss, like the seed's model; milliseconds a step."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(LAYERS):
            layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
        self.body = torch.nn.Sequential(*layers[:-1])

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)


def heavy_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(WIDTH, WIDTH, device="cuda", generator=gen)
    return x, torch.randn(WIDTH, WIDTH, device="cuda", generator=gen) * 0.1


def device_ms(pairs: list[tuple[Any, Any]]) -> list[float]:
    """Each (start, end) event pair's milliseconds, after waiting for the device."""
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def timed(pairs: list[tuple[Any, Any]], call: Callable[[], Any]) -> Any:
    event: Any = torch.cuda.Event
    start, end = event(enable_timing=True), event(enable_timing=True)
    start.record()
    result = call()
    end.record()
    pairs.append((start, end))
    return result


def journal(folder: Path) -> dict[str, dict[int, float]]:
    """``{metric: {step: value}}`` from a JSONL journal."""
    out: dict[str, dict[int, float]] = {}
    for record in trainmon.read_journal(folder):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                out.setdefault(name, {})[record["step"]] = value
    return out


def steady(series: dict[int, float]) -> list[float]:
    """The values after the warm-up steps."""
    return [value for step, value in sorted(series.items()) if step > WARMUP]


def config(folder: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "train_batch_size": WIDTH,
        "steps_per_print": 1000,
        "wall_clock_breakdown": True,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(folder), "job_name": "job"},
    }
    base.update(extra)
    return base


def test_engine_on_cuda_times_the_device_and_never_waits_on_the_training_thread(
    tmp_path: Path,
) -> None:
    """trainmon's engine: the forward / backward breakdown is the device's time (within 25 %
    of events around the same calls in a bare loop), the loss and gradient norm match, the
    CUDA memory counters agree with torch's, and the training thread waits no more than the
    bare loop does."""
    torch.manual_seed(0)
    model = HeavyRegressor().cuda()
    batch = heavy_batch()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    forward: list[tuple[Any, Any]] = []
    backward: list[tuple[Any, Any]] = []
    with waits_by_thread() as bare_waits:
        for _ in range(STEPS):
            loss = timed(forward, lambda: model(batch))
            timed(backward, loss.backward)
            opt.step()
            opt.zero_grad()
    bare_forward = statistics.median(device_ms(forward)[WARMUP:])
    bare_backward = statistics.median(device_ms(backward)[WARMUP:])
    assert bare_forward > 1.0, "the model must keep the device busy for milliseconds"

    torch.cuda.reset_peak_memory_stats()
    engine, _, _, _ = trainmon.initialize(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=1e-4),
        config=config(tmp_path, gradient_clipping=1e9),
    )
    losses: list[torch.Tensor] = []
    with waits_by_thread() as waits:
        for _ in range(STEPS):
            loss = engine(batch)
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
    main = threading.main_thread().name
    assert waits.by_thread[main] <= bare_waits.by_thread[main], waits.added(bare_waits, main)
    engine.close()
    peak_mb = torch.cuda.max_memory_allocated() / MIB
    got = journal(tmp_path / "job")

    forward_ms = statistics.median(steady(got["perf/forward_ms"]))
    backward_ms = statistics.median(steady(got["perf/backward_inner_ms"]))
    assert forward_ms == pytest.approx(bare_forward, rel=0.25), (forward_ms, bare_forward)
    assert backward_ms == pytest.approx(bare_backward, rel=0.25), (backward_ms, bare_backward)
    assert got["train/loss"] == pytest.approx(
        {step + 1: loss.item() for step, loss in enumerate(losses)}, rel=1e-5
    )
    assert all(norm > 0 and norm == norm for norm in got["train/grad_norm"].values())
    allocated, peak = got["mem/allocated_mb"], got["mem/peak_allocated_mb"]
    reserved = got["mem/reserved_mb"]
    assert all(allocated[s] <= peak[s] and allocated[s] <= reserved[s] for s in allocated)
    assert max(peak.values()) == pytest.approx(peak_mb, rel=0.05)
    assert min(allocated.values()) >= LAYERS * WIDTH * WIDTH * 4 / MIB  # the weights at least


def test_cuda_tensors_are_read_after_their_kernels_without_a_wait(tmp_path: Path) -> None:
    """write_events with 16 same-shape CUDA scalars per step (one stack on the device) and a
    CUDA histogram: the values read back are the tensors' final values, and the training
    thread never waited for the device."""
    a = torch.randn(WIDTH, WIDTH, device="cuda") / WIDTH**0.5
    kept: dict[int, list[torch.Tensor]] = {}
    folder = tmp_path / "tb"
    cfg = config(tmp_path, tensorboard={"enabled": True, "output_path": str(folder)})
    with waits_by_thread() as waits, trainmon.Monitor(cfg) as monitor:
        for step in range(1, STEPS + 1):
            monitor.step = step
            b = a
            for _ in range(4):  # the values are not ready when they are enqueued
                b = b @ a
            values = [b[i, i] * 1.0 for i in range(16)]
            monitor.write_events([(f"t/v{i}", v) for i, v in enumerate(values)])
            monitor.log_histogram("t/row", b[0])
            kept[step] = values
        main = threading.main_thread().name
        main_waits = dict(waits.sites)
    assert not any(thread == main for thread, _ in main_waits), main_waits
    got = journal(tmp_path / "job")
    for i in range(16):
        expected = {step: values[i].item() for step, values in kept.items()}
        assert got[f"t/v{i}"] == pytest.approx(expected, rel=1e-6)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = [p.parent for p in folder.rglob("events.out.tfevents.*")]
    acc = EventAccumulator(str(runs[0]), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    histograms = acc.Histograms("t/row")
    assert [h.step for h in histograms] == list(range(1, STEPS + 1))
    assert all(h.histogram_value.num == WIDTH for h in histograms)


def test_gpu_system_metrics_come_from_nvml(tmp_path: Path) -> None:
    """system_metrics adds sys/gpu0/* from NVML; the memory NVML sees covers what torch holds."""
    pytest.importorskip("pynvml")
    hold = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")
    cfg = config(tmp_path, system_metrics={"enabled": True, "interval_s": 0.1})
    with trainmon.Monitor(cfg) as monitor:
        for step in range(1, 21):
            monitor.step = step
            monitor.write_events([("t/x", float(step))])
            threading.Event().wait(0.05)
    got = journal(tmp_path / "job")
    for field in ("util_percent", "mem_used_mb"):  # power and clocks: where NVML reads them
        assert f"sys/gpu0/{field}" in got, sorted(n for n in got if n.startswith("sys/"))
    assert max(got["sys/gpu0/mem_used_mb"].values()) >= torch.cuda.memory_reserved() / MIB
    assert hold.numel() == 512 * MIB


def _one_rank_nccl() -> None:
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        os.environ[key] = value
    os.environ["WORLD_SIZE"] = "1"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])


def test_attach_to_deepspeed_on_cuda(tmp_path: Path) -> None:
    """trainmon.attach beside DeepSpeed's CUDA engine (NCCL, ZeRO 0): the breakdown is the
    device's time and the training thread waits no more than without trainmon."""
    if os.environ.setdefault("DS_ACCELERATOR", "cuda") != "cuda":
        pytest.skip("DS_ACCELERATOR names another accelerator")
    deepspeed = pytest.importorskip("deepspeed")
    from trainmon.integrations.deepspeed import detach

    _one_rank_nccl()
    deepspeed.init_distributed(dist_backend="nccl")
    try:
        torch.manual_seed(0)
        body = HeavyRegressor().body
        engine, _, _, _ = deepspeed.initialize(
            model=body,
            model_parameters=body.parameters(),
            config={
                "train_batch_size": WIDTH,
                "steps_per_print": 1000,
                "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
                "zero_optimization": {"stage": 0},
            },
        )
        x, y = heavy_batch()

        def step(pairs: list[tuple[Any, Any]] | None = None) -> None:
            out = timed(pairs, lambda: engine(x)) if pairs is not None else engine(x)
            engine.backward(torch.nn.functional.mse_loss(out, y))
            engine.step()

        for _ in range(WARMUP):  # DeepSpeed's throughput timer starts waiting at its step 2
            step()
        forward: list[tuple[Any, Any]] = []
        with waits_by_thread() as bare_waits:
            for _ in range(STEPS):
                step(forward)
        bare_forward = statistics.median(device_ms(forward)[WARMUP:])
        monitor = trainmon.attach(engine, config(tmp_path))
        with waits_by_thread() as waits:
            for _ in range(STEPS):
                step()
        main = threading.main_thread().name
        added = waits.added(bare_waits, main)
        assert waits.by_thread[main] <= bare_waits.by_thread[main], added
        assert monitor.enabled
        detach(engine)  # closes trainmon's monitor
    finally:
        torch.distributed.destroy_process_group()
    got = journal(tmp_path / "job")
    forward_ms = statistics.median(steady(got["perf/forward_ms"]))
    assert forward_ms == pytest.approx(bare_forward, rel=0.25), (forward_ms, bare_forward)
    assert len(got["train/loss"]) == STEPS
    assert "mem/allocated_mb" in got
