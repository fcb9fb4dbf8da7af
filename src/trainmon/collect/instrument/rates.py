"""Per-step throughput: samples, tokens, achieved TFLOPS and MFU over the step's own time."""

from __future__ import annotations

from typing import Any

from trainmon.collect.throughput import mfu, peak_tflops_for, tflops
from trainmon.config import ThroughputConfig
from trainmon.logging import get_logger

_log = get_logger("instrument")


class Throughput:
    """Adds ``perf/samples_per_sec`` and, when configured, tokens/s, TFLOPS and MFU."""

    __slots__ = ("flops_per_sample", "peak_tflops", "tokens_per_sample")

    def __init__(
        self,
        tokens_per_sample: int | None = None,
        flops_per_sample: float | None = None,
        peak_tflops: float | None = None,
    ) -> None:
        self.tokens_per_sample = tokens_per_sample
        self.flops_per_sample = flops_per_sample
        self.peak_tflops = peak_tflops

    @classmethod
    def from_config(cls, config: ThroughputConfig, device: Any = None) -> Throughput:
        """The config's numbers; on CUDA an unset peak is looked up by the device's name."""
        peak = config.peak_tflops
        name = None
        if getattr(device, "type", None) == "cuda":
            import torch

            name = torch.cuda.get_device_name(device)
            if peak is None:
                peak = peak_tflops_for(name)
        if config.flops_per_sample is not None and peak is None:
            _log.info(
                "perf/mfu is not logged: the peak TFLOPS of device %r is not known; set "
                "throughput.peak_tflops to log it",
                name or getattr(device, "type", "cpu"),
            )
        return cls(config.tokens_per_sample, config.flops_per_sample, peak)

    def add_to(
        self, items: list[tuple[str, Any]], step_s: float, samples: float, tokens: float | None
    ) -> None:
        """Append this step's rates: work over ``step_s`` (0.0 for a step of no time)."""
        per_s = 1.0 / step_s if step_s > 0.0 else 0.0
        samples_per_sec = samples * per_s
        items.append(("perf/samples_per_sec", samples_per_sec))
        if tokens is None and self.tokens_per_sample is not None:
            tokens = samples * self.tokens_per_sample
        if tokens is not None:
            items.append(("perf/tokens_per_sec", tokens * per_s))
        flops = self.flops_per_sample
        if flops is not None:
            achieved = tflops(samples_per_sec, flops)
            items.append(("perf/tflops", achieved))
            if self.peak_tflops is not None:
                items.append(("perf/mfu", mfu(achieved, self.peak_tflops)))
