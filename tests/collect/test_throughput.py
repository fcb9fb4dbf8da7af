"""Throughput arithmetic and the table of accelerator peaks used for MFU."""

from __future__ import annotations

import pytest

from trainmon.collect.throughput import PEAK_TFLOPS, mfu, peak_tflops_for, tflops


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA GH200 480GB", 989.0),
        ("Tesla V100-SXM2-16GB", 125.0),
        ("Tesla V100-PCIE-32GB", 112.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA GeForce RTX 4090", 165.0),
        ("AMD Instinct MI300X", 1307.0),
        ("Tesla T4", 65.0),
    ],
)
def test_known_accelerators_have_their_dense_peak(name: str, peak: float) -> None:
    """Device names as torch.cuda.get_device_name() spells them map to their dense 16-bit peak."""
    assert peak_tflops_for(name) == peak


@pytest.mark.parametrize("name", [None, "", "cpu", "NVIDIA A10G", "Some Future GPU X1"])
def test_unknown_devices_have_no_peak(name: str | None) -> None:
    """Unknown names (a CPU, a variant not in the table) give None rather than a guess."""
    assert peak_tflops_for(name) is None


def test_more_specific_names_come_first() -> None:
    """No table entry is shadowed by an earlier one whose tokens it contains."""
    for index, (tokens, _) in enumerate(PEAK_TFLOPS):
        for earlier, _ in PEAK_TFLOPS[:index]:
            assert not set(tokens) >= set(earlier), (tokens, earlier)


def test_tflops_and_mfu_arithmetic() -> None:
    """TFLOPS = samples/s x FLOPs per sample / 1e12, and MFU = TFLOPS / peak."""
    achieved = tflops(samples_per_sec=250.0, flops_per_sample=6 * 125e6 * 1024)
    assert achieved == pytest.approx(192.0)
    assert mfu(achieved, 312.0) == pytest.approx(192.0 / 312.0)
