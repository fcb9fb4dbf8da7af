"""System metrics (``sys/*``): sampled off the training thread, checked against what the
test did."""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.collect.system import GPU_FIELDS, SystemSampler, process_gpu_indices
from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.cross_rank import pack_window, summarise_ranks
from trainmon.journal import read_journal

MIB = 1024 * 1024
HAS_NVML = importlib.util.find_spec("pynvml") is not None


def _config(base: Path, interval_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "steps_per_print": 5,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "system_metrics": {"interval_s": interval_s},
        **extra,
    }


def _scalars(base: Path) -> list[dict[str, Any]]:
    return [r for r in read_journal(base / "job" / "metrics.jsonl") if r["kind"] == "scalars"]


def test_busy_core_and_20_mib_written_show_in_the_samples(tmp_path: Path) -> None:
    """A training thread that keeps one core busy and writes 20 MiB is sampled as such: the mean
    process CPU matches the CPU time the process used over the span, the disk MiB add up to
    what was written, every sample lands at a step of the loop, and no GPU figure is made up."""
    data = tmp_path / "data.bin"
    interval = 0.25
    with trainmon.Monitor(_config(tmp_path, interval)) as monitor:
        wall0, cpu0 = time.monotonic(), time.process_time()
        step = 0
        with open(data, "wb") as f:
            while time.monotonic() - wall0 < 3.0:
                step += 1
                monitor.step = step
                monitor.log({"train/loss": 1.0})
                spin_until = time.monotonic() + 0.02
                while time.monotonic() < spin_until:  # one core busy
                    pass
                if step <= 20:
                    f.write(os.urandom(MIB))
                    f.flush()
                    os.fsync(f.fileno())
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    truth_percent = 100 * cpu / wall
    records = _scalars(tmp_path)
    samples = [r for r in records if "sys/process_cpu_percent" in r["values"]]
    assert len(samples) >= 8, f"{len(samples)} samples in {wall:.1f} s at {interval} s"
    cpu_values = [r["values"]["sys/process_cpu_percent"] for r in samples]
    sampled = sum(cpu_values) / len(cpu_values)
    assert abs(sampled - truth_percent) < 25, (sampled, truth_percent)
    assert truth_percent > 40  # the loop really kept a core busy (even on a shared machine)
    written = sum(r["values"].get("sys/disk_write_mb", 0.0) for r in records)
    assert 20.0 <= written < 23.0, written  # 20 MiB plus the journal's own few KiB
    steps = {r["step"] for r in records if "train/loss" in r["values"]}
    assert {r["step"] for r in samples} <= steps | {0}
    for r in samples:
        values = r["values"]
        assert 0 <= values["sys/cpu_percent"] <= 100
        assert values["sys/process_rss_mb"] > 10
        assert values["sys/net_recv_mb"] >= 0 and values["sys/net_sent_mb"] >= 0
    names = {name for r in records for name in r["values"]}
    if not HAS_NVML:
        assert not any(name.startswith("sys/gpu") for name in names), names
    windows = [r for r in read_journal(tmp_path / "job" / "metrics.jsonl") if r["kind"] == "window"]
    assert any("sys/process_cpu_percent" in w["stats"] for w in windows)


def test_a_rule_on_a_system_metric_fires(tmp_path: Path) -> None:
    """sys/* metrics are alertable like any metric: a threshold on the process RSS fires."""
    rule = {
        "name": "rss",
        "kind": "threshold",
        "metric": "sys/process_rss_mb",
        "op": ">",
        "threshold": 1,
    }
    config = _config(tmp_path, 0.05, alerts={"rules": [rule], "sinks": [{"type": "file"}]})
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 40):
            monitor.step = step
            monitor.log({"train/loss": 1.0})
            time.sleep(0.01)
    alerts = (tmp_path / "job" / "alerts.jsonl").read_text()
    assert '"rule":"rss"' in alerts.replace(" ", "") and "firing" in alerts


def test_samples_are_not_training_progress(tmp_path: Path) -> None:
    """The stall watchdog reads Monitor.progress(): samples queued by the sampler leave it as is."""
    with trainmon.Monitor(_config(tmp_path, 0.02)) as monitor:
        monitor.step = 1
        monitor.log({"train/loss": 1.0})
        before = monitor.progress()
        time.sleep(0.3)  # about 15 samples
        assert monitor.progress() == before
        monitor.flush()
    assert any("sys/process_rss_mb" in r["values"] for r in _scalars(tmp_path))


def test_disabled_means_no_sampler_thread(tmp_path: Path) -> None:
    """system_metrics.enabled false: no thread, no sys/* value."""
    config = _config(tmp_path, 0.02)
    config["system_metrics"]["enabled"] = False
    with trainmon.Monitor(config) as monitor:
        import threading

        assert "trainmon-system-metrics" not in {t.name for t in threading.enumerate()}
        for step in range(1, 10):
            monitor.step = step
            monitor.log({"train/loss": 1.0})
            time.sleep(0.02)
    assert not any(name.startswith("sys/") for r in _scalars(tmp_path) for name in r["values"])


def test_sys_metrics_are_reduced_across_ranks() -> None:
    """Each rank's sys/* window figure goes into the cross-rank min/mean/max and which rank."""

    def window(cpu: float, throttle: float) -> WindowStats:
        metrics = {
            "perf/step_time_ms": MetricStats(5, 10.0, 10.0, 10.0, 10.0),
            "sys/process_cpu_percent": MetricStats(2, cpu, cpu, cpu, cpu),
            "sys/gpu0/throttle": MetricStats(2, throttle, 0.0, throttle, throttle),
        }
        return WindowStats(1, 5, 0.0, 1.0, metrics)

    out = summarise_ranks([pack_window(window(90.0, 0.0)), pack_window(window(30.0, 4.0))])
    assert out["sys/process_cpu_percent/min"] == 30.0
    assert out["sys/process_cpu_percent/max"] == 90.0
    assert out["sys/process_cpu_percent/argmax_rank"] == 0
    assert out["sys/gpu0/throttle/max"] == 4.0 and out["sys/gpu0/throttle/argmax_rank"] == 1
    assert "sys/gpu0/power_w/max" not in out  # no rank had it: left out, not zero


# ---- GPUs: which are this process's, and fields left out one at a time -------------------------


def test_process_gpus_follow_cuda_visible_devices_and_local_rank() -> None:
    """A launcher's LOCAL_RANK picks its visible GPU; without one, every visible GPU is sampled."""
    assert process_gpu_indices(4, {}) == ["0", "1", "2", "3"]
    assert process_gpu_indices(4, {"LOCAL_RANK": "2"}) == ["2"]
    assert process_gpu_indices(8, {"CUDA_VISIBLE_DEVICES": "5,7", "LOCAL_RANK": "1"}) == ["7"]
    assert process_gpu_indices(8, {"CUDA_VISIBLE_DEVICES": "3", "LOCAL_RANK": "5"}) == ["3"]
    assert process_gpu_indices(2, {"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd34"}) == [
        "GPU-ab12",
        "GPU-cd34",
    ]
    assert process_gpu_indices(2, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert process_gpu_indices(2, {"CUDA_VISIBLE_DEVICES": "1,-1,0"}) == ["1"]


class _NotSupported(Exception):
    """What NVML raises for a field a board lacks (NVMLError_NotSupported)."""


def _nvml_standing_in(power_supported: bool) -> types.ModuleType:
    """NVML cannot run on a machine without an NVIDIA driver: this stands in for one GPU."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    nvml.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]

    def power(handle: object) -> int:
        if not power_supported:
            raise _NotSupported("Not Supported")
        return 312_500  # mW

    functions = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: f"gpu{i}",
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=87, memory=40),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(used=3 * MIB * 1024),
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetTemperature": lambda h, sensor: 71,
        "nvmlDeviceGetClockInfo": lambda h, clock: 1410,
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: 0x4,
    }
    for name, function in functions.items():
        setattr(nvml, name, function)
    return nvml


def test_an_unsupported_gpu_field_is_left_out_alone(
    monkeypatch: pytest.MonkeyPatch, trainmon_logs: list[logging.LogRecord]
) -> None:
    """A GPU without a power reading loses sys/gpu0/power_w only; the other fields are sampled,
    with NVML's own values, and the left-out field is named once in the log."""
    monkeypatch.setitem(sys.modules, "pynvml", _nvml_standing_in(power_supported=False))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = SystemSampler(lambda items: None, 1.0)
    try:
        sampler.prime()
        first, second = dict(sampler.sample()), dict(sampler.sample())
    finally:
        sampler.close()
    assert "sys/gpu0/power_w" not in first and "sys/gpu0/power_w" not in second
    assert first["sys/gpu0/util_percent"] == 87.0
    assert first["sys/gpu0/mem_used_mb"] == 3072.0
    assert first["sys/gpu0/temp_c"] == 71.0
    assert first["sys/gpu0/sm_clock_mhz"] == 1410.0
    assert first["sys/gpu0/throttle"] == 4.0
    assert not any(name.startswith("sys/gpu1") for name in first)  # LOCAL_RANK 1: one GPU
    assert len({f"sys/gpu0/{name}" for name, _ in GPU_FIELDS} & set(first)) == 5
    left_out = [r.getMessage() for r in trainmon_logs if "power_w is left out" in r.getMessage()]
    assert len(left_out) == 1


@pytest.mark.skipif(not HAS_NVML, reason="needs nvidia-ml-py and a GPU")
def test_gpu_fields_on_a_real_gpu() -> None:
    """On a machine with NVML, the GPU fields come from the device and are in their ranges."""
    sampler = SystemSampler(lambda items: None, 1.0)
    try:
        sampler.prime()
        values = dict(sampler.sample())
    finally:
        sampler.close()
    gpu = {k: v for k, v in values.items() if k.startswith("sys/gpu0/")}
    assert gpu, values
    assert 0 <= gpu.get("sys/gpu0/util_percent", 0) <= 100
    assert gpu.get("sys/gpu0/mem_used_mb", 1) > 0
    assert 0 < gpu.get("sys/gpu0/temp_c", 40) < 110
    assert not math.isnan(sum(gpu.values()))
