"""Probes and span timers: values read in the background, sums kept right, events reused."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmon
from trainmon.collect import meters
from trainmon.collect.device_timing import (
    CudaSpanTimer,
    EventPool,
    EventSpans,
    HostSpanTimer,
    span_timers,
)
from trainmon.core.values import Deferred

# ---- memory ------------------------------------------------------------------------------------


def test_rss_probes_are_deferred_and_peak_is_never_below_current() -> None:
    """The RSS probes are Deferred values; resolved, peak RSS is at least the current RSS."""
    assert isinstance(meters.RSS_PROBE, Deferred) and isinstance(meters.PEAK_RSS_PROBE, Deferred)
    rss = meters.RSS_PROBE.resolve()
    peak = meters.PEAK_RSS_PROBE.resolve()
    assert rss is not None and peak is not None
    assert 1.0 < rss <= peak
    assert rss == pytest.approx(meters.rss_mb(), rel=0.2)


def test_rss_sampler_reuses_a_recent_sample_then_reads_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within max_age_s the sampler reuses its reading; after it, it reads /proc again."""
    reads: list[int] = []
    pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        reads.append(fd)
        return pread(fd, size, offset)

    monkeypatch.setattr(meters.os, "pread", counting_pread)
    sampler = meters._RssSampler(max_age_s=0.05)
    first = sampler.rss_mb()
    sampler.peak_mb()
    sampler.rss_mb()
    assert len(reads) == 1
    time.sleep(0.06)
    assert sampler.rss_mb() == pytest.approx(first, rel=0.2)
    assert len(reads) == 2 and reads[0] == reads[1]  # one descriptor, kept open


def test_engine_reads_memory_only_on_the_background_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training with the engine reads /proc only from the monitor's background thread."""
    threads: set[int] = set()
    pread = os.pread

    def recording_pread(fd: int, size: int, offset: int) -> bytes:
        threads.add(threading.get_ident())
        return pread(fd, size, offset)

    monkeypatch.setattr(meters.os, "pread", recording_pread)
    monkeypatch.setattr(meters, "_SAMPLER", meters._RssSampler(max_age_s=0.0))
    net = torch.nn.Linear(4, 1)
    config = {
        "train_batch_size": 2,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
    }
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with trainmon.initialize(model=net, optimizer=optimizer, config=config)[0] as engine:
        for _ in range(3):
            engine.backward(engine(torch.randn(2, 4)).sum())
            engine.step()
    assert threads and threading.get_ident() not in threads
    records = [r for r in trainmon.read_journal(tmp_path / "job") if r["kind"] == "scalars"]
    assert all(r["values"]["mem/rss_mb"] > 1.0 for r in records)


# ---- loss mean and gradient norm ---------------------------------------------------------------


def test_tensor_mean_is_computed_when_resolved() -> None:
    """TensorMean averages 0-d and 1-element tensors of mixed dtypes; NaN propagates."""
    values = [torch.tensor(1.0), torch.tensor([2.0], dtype=torch.float16), torch.tensor(6.0)]
    assert meters.TensorMean(values).resolve() == pytest.approx(3.0)
    assert math.isnan(meters.TensorMean([torch.tensor(1.0), torch.tensor(math.nan)]).resolve())
    assert meters.TensorMean([]).resolve() is None


def test_total_grad_norm_equals_the_norm_of_all_gradients() -> None:
    """The total norm equals the 2-norm of every gradient concatenated, on every code path."""
    torch.manual_seed(0)
    grads = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2, 2)]
    expected = torch.cat([g.flatten() for g in grads]).norm()
    torch.testing.assert_close(meters.total_grad_norm(grads, True), expected)
    torch.testing.assert_close(meters.total_grad_norm(grads, False), expected)
    mixed = [grads[0].double(), grads[1], grads[2].bfloat16()]
    assert meters.total_grad_norm(mixed, False).item() == pytest.approx(expected.item(), rel=1e-2)
    big = [torch.full((4,), 60000.0, dtype=torch.float16)]  # its square overflows in fp16
    assert meters.total_grad_norm(big, True).item() == pytest.approx(120000.0, rel=1e-3)
    assert meters.total_grad_norm([], True).item() == 0.0


def test_norm_of_norms_resolves_the_same_with_or_without_a_graph() -> None:
    """``grad_norm``'s deferred norm, resolved in the background, equals the norm of all the
    gradients both for plain gradients (no ``no_grad`` entered) and for gradients of a
    ``create_graph`` backward (norms that carry a graph), and leaves grad mode as it was."""
    from trainmon.collect.instrument import NormOfNorms, grad_norm

    torch.manual_seed(0)
    grads = [torch.randn(3, 4), torch.randn(5)]
    expected = torch.cat([g.flatten() for g in grads]).norm().item()
    plain = grad_norm(grads, True)
    assert isinstance(plain, NormOfNorms)
    assert plain.resolve() == pytest.approx(expected, rel=1e-6)
    weight = torch.randn(4, requires_grad=True)
    (grad,) = torch.autograd.grad((weight**3).sum(), weight, create_graph=True)
    assert grad.requires_grad
    with_graph = grad_norm([grad], True)
    assert with_graph.norms[0].requires_grad
    assert with_graph.resolve() == pytest.approx(grad.detach().norm().item(), rel=1e-6)
    assert torch.is_grad_enabled()


def test_cuda_memory_probes_read_the_allocator_once_per_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CUDA memory probes give MiB and a retry count from one read of the allocator's
    nested stats, shared by every probe resolved within a batch."""
    reads: list[Any] = []
    stats = {
        "allocated_bytes": {"all": {"current": 3 * 2**20, "peak": 5 * 2**20}},
        "reserved_bytes": {"all": {"current": 8 * 2**20}},
        "num_alloc_retries": 2,
    }

    def nested(device: Any) -> dict[str, Any]:
        reads.append(device)
        return stats

    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    probes = meters.cuda_memory_probes("cuda:1")
    values = {name: probe.resolve() for name, probe in probes.items()}
    assert values == {
        "allocated_mb": 3.0,
        "peak_allocated_mb": 5.0,
        "reserved_mb": 8.0,
        "alloc_retries": 2,
    }
    assert reads == ["cuda:1"]
    stats = {}  # an allocator that has not allocated yet reads as zeros
    time.sleep(0.03)
    assert probes["reserved_mb"].resolve() == 0.0 and probes["alloc_retries"].resolve() == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_memory_counters() -> None:  # pragma: no cover - no GPU in CI
    """CUDA memory probes agree with torch's own counters."""
    device = torch.device("cuda")
    hold = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    probes = meters.cuda_memory_probes(device)
    values = {name: probe.resolve() for name, probe in probes.items()}
    assert values["allocated_mb"] == torch.cuda.memory_allocated(device) / 2**20 >= 64
    assert values["peak_allocated_mb"] == torch.cuda.max_memory_allocated(device) / 2**20
    assert values["reserved_mb"] == torch.cuda.memory_reserved(device) / 2**20
    assert isinstance(values["alloc_retries"], int)
    del hold


# ---- span timers -------------------------------------------------------------------------------


def test_host_span_timer_adds_spans_and_resets_on_take() -> None:
    """A host span timer sums its spans in ms and starts again from zero after take()."""
    timer = HostSpanTimer()
    for _ in range(2):
        timer.start()
        time.sleep(0.005)
        timer.stop()
    first = timer.take()
    assert first >= 10.0
    assert timer.take() == 0.0


class FakeEvent:
    """Stands in for ``torch.cuda.Event``: records a time and what was asked of it."""

    clock = 0.0

    def __init__(self) -> None:
        self.at: float | None = None
        self.synchronized = 0
        self.streams: list[Any] = []

    def record(self, stream: Any = None) -> None:
        FakeEvent.clock += 1.5
        self.at = FakeEvent.clock
        self.streams.append(stream)

    def synchronize(self) -> None:
        self.synchronized += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None and end.synchronized
        return end.at - self.at


def test_event_timer_defers_the_wait_and_reuses_its_events() -> None:
    """The event timer only records on the training thread; resolving sums and frees events."""
    pool = EventPool(FakeEvent)
    timer = CudaSpanTimer(
        pool, device="cuda:1", current_stream=lambda device: f"stream of {device}"
    )
    assert timer.take() == 0.0
    for _ in range(3):
        timer.start()
        timer.stop()
    spans = timer.take()
    assert isinstance(spans, EventSpans)
    assert pool.created == 6 and pool.free == 0
    events = spans._events
    assert all(e.synchronized == 0 for e in events)  # nothing waited on yet
    assert events[0].streams == ["stream of cuda:1"]
    assert spans.resolve() == pytest.approx(4.5)  # three spans of 1.5 ms
    assert pool.free == 6
    timer.start()
    timer.stop()
    assert pool.created == 6  # reused, not created
    assert timer.take().resolve() == pytest.approx(1.5)  # type: ignore[union-attr]


def test_event_spans_ignore_a_span_cut_short() -> None:
    """A start without its end (an exception in the forward) does not break the sum."""
    pool = EventPool(FakeEvent)
    events = [FakeEvent(), FakeEvent(), FakeEvent()]
    for event in events:
        event.record()
    assert EventSpans(events, pool).resolve() == pytest.approx(1.5)
    assert pool.free == 3


def test_event_pool_keeps_a_bounded_number_of_free_events() -> None:
    """Returned events beyond ``keep`` are dropped rather than hoarded."""
    pool = EventPool(FakeEvent, keep=4)
    events = [pool.acquire() for _ in range(10)]
    pool.release(events[:5])
    pool.release(events[5:])
    assert pool.free == 4


def test_span_timers_are_host_timers_off_cuda() -> None:
    """On the CPU the engine gets host timers (CPU work is done when a call returns)."""
    timers = span_timers(torch.device("cpu"), 3)
    assert len(timers) == 3 and all(isinstance(t, HostSpanTimer) for t in timers)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_event_timer_measures_device_time() -> None:  # pragma: no cover - no GPU in CI
    """On a GPU the event timer measures a matmul without synchronising the caller."""
    timer = span_timers(torch.device("cuda"), 1)[0]
    a = torch.randn(2048, 2048, device="cuda")
    timer.start()
    for _ in range(10):
        a = a @ a / 2048
    timer.stop()
    spans = timer.take()
    assert isinstance(spans, EventSpans)
    assert spans.resolve() > 0.0
