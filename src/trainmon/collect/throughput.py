"""Samples per second → tokens per second, achieved TFLOPS and MFU, plus known accelerator peaks.

Model FLOPs utilisation (MFU) is the achieved FLOP rate of one device divided by its peak dense
rate, as in PaLM (Chowdhery et al. 2022, appendix B) and Megatron-LM. The FLOPs of one sample are
given by the user (``throughput.flops_per_sample``, e.g. ``6 x parameters x tokens``); the peak
comes from ``throughput.peak_tflops`` or from :data:`PEAK_TFLOPS` by device name. This module is
plain arithmetic: it imports no torch and is safe on the training thread.
"""

from __future__ import annotations

import re

# Peak dense (no structured sparsity) tensor-core TFLOPS of one device, in the 16-bit format
# people train in: bf16 where the device has it, fp16 otherwise. Each entry is a tuple of name
# tokens that must all appear in ``torch.cuda.get_device_name()`` (upper-cased, split on
# anything that is not a letter or digit); the first entry that matches wins, so more specific
# names come first. Sources: vendor datasheets.
PEAK_TFLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    # NVIDIA Blackwell datasheet (HGX B200): 2.25 PFLOPS bf16 dense per GPU.
    (("B200",), 2250.0),
    # NVIDIA H200 datasheet: 1,979 TFLOPS bf16 with sparsity (SXM) → 989 dense;
    # H200 NVL 1,671 → 835.
    (("H200", "NVL"), 835.0),
    (("H200",), 989.0),
    # NVIDIA H100 datasheet: SXM 1,979 sparse → 989 dense; PCIe 1,513 → 756; NVL 1,671 → 835.
    (("H100", "PCIE"), 756.0),
    (("H100", "NVL"), 835.0),
    (("H100",), 989.0),
    (("GH200",), 989.0),
    (("H800",), 989.0),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16 dense (624 with sparsity); A800 is the same chip.
    (("A100",), 312.0),
    (("A800",), 312.0),
    # NVIDIA A10 datasheet: 125 TFLOPS bf16 dense (250 sparse).
    (("A10",), 125.0),
    # NVIDIA L40S datasheet: 362 TFLOPS bf16 dense (733 sparse); L40: 181 (362 sparse).
    (("L40S",), 362.0),
    (("L40",), 181.0),
    # NVIDIA L4 datasheet: 121 TFLOPS bf16 dense (242 sparse).
    (("L4",), 121.0),
    # NVIDIA T4 datasheet: 65 TFLOPS fp16 (no bf16).
    (("T4",), 65.0),
    # NVIDIA V100 datasheet: 125 TFLOPS fp16 tensor (SXM2); PCIe 112.
    (("V100", "PCIE"), 112.0),
    (("V100",), 125.0),
    # NVIDIA Ada Lovelace GPU architecture whitepaper, RTX 4090: 165 TFLOPS bf16 dense with
    # fp32 accumulation (330 with fp16 accumulation).
    (("RTX", "4090"), 165.0),
    # NVIDIA Ampere GA102 whitepaper, RTX 3090: 71 TFLOPS fp16/bf16 dense with fp32 accumulation.
    (("RTX", "3090"), 71.0),
    # AMD Instinct datasheets: MI300X 1,307 TFLOPS bf16 dense; MI325X the same;
    # MI250X 383; MI250 362.
    (("MI300X",), 1307.0),
    (("MI325X",), 1307.0),
    (("MI250X",), 383.0),
    (("MI250",), 362.0),
)

_TOKEN = re.compile(r"[A-Z0-9]+")


def peak_tflops_for(device_name: str | None) -> float | None:
    """The peak dense 16-bit TFLOPS of a device named like ``torch.cuda.get_device_name()``.

    None when the name is unknown (a CPU, or an accelerator missing from :data:`PEAK_TFLOPS`).
    """
    if not device_name:
        return None
    tokens = set(_TOKEN.findall(device_name.upper()))
    for needed, peak in PEAK_TFLOPS:
        if tokens.issuperset(needed):
            return peak
    return None


def tflops(samples_per_sec: float, flops_per_sample: float) -> float:
    """Achieved TFLOPS of one device from its own samples per second."""
    return samples_per_sec * flops_per_sample * 1e-12


def mfu(achieved_tflops: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved over peak, a fraction in [0, 1] for honest inputs."""
    return achieved_tflops / peak_tflops
