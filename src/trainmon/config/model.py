"""The whole typed config: one field per section, plus the raw mapping it came from."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmon.config.alerting import AlertsConfig
from trainmon.config.sections import (
    CometConfig,
    CommsLoggerConfig,
    ConsoleConfig,
    CsvMonitorConfig,
    JsonlConfig,
    MlflowConfig,
    PipelineConfig,
    ProfilerConfig,
    PrometheusConfig,
    SystemMetricsConfig,
    TensorBoardConfig,
    ThroughputConfig,
    WandbConfig,
)
from trainmon.schema import (
    Settings,
    setting,
)


@dataclass(frozen=True)
class TrainmonConfig(Settings):
    """The monitoring part of a DeepSpeed-style config, validated; ``raw`` keeps the whole dict."""

    steps_per_print: int = setting(
        "Console line every N steps (DeepSpeed's default).", default=10, ge=1
    )
    wall_clock_breakdown: bool = setting(
        "Report forward/backward/optimizer/communication/data time per step.", default=False
    )
    train_batch_size: int | None = setting(
        "Samples per optimizer step across all ranks (DeepSpeed's rule).", default=None, ge=1
    )
    train_micro_batch_size_per_gpu: int | None = setting(
        "Samples per forward on one rank.", default=None, ge=1
    )
    gradient_accumulation_steps: int | None = setting(
        "Micro-batches per optimizer step.", default=None, ge=1
    )
    gradient_clipping: float = setting(
        "Clip the global gradient norm to this; 0 means no clipping.", default=0.0, ge=0
    )
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    csv_monitor: CsvMonitorConfig = field(default_factory=CsvMonitorConfig)
    jsonl: JsonlConfig = field(default_factory=JsonlConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    comet: CometConfig = field(default_factory=CometConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    trainmon: PipelineConfig = field(default_factory=PipelineConfig)
    comms_logger: CommsLoggerConfig = field(default_factory=CommsLoggerConfig)
    throughput: ThroughputConfig = field(default_factory=ThroughputConfig)
    system_metrics: SystemMetricsConfig = field(default_factory=SystemMetricsConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    writers: list[dict[str, Any]] | None = setting(
        'Writers of your own, each {"class": "package.module:Name", ...keyword arguments of '
        "its constructor} or a name given to trainmon.writers.register_writer.",
        default=None,
    )
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def check(self) -> None:
        """A file sink without a path needs a run folder: known once the outputs are known."""
        outputs = (self.tensorboard, self.csv_monitor, self.jsonl)
        self.alerts.sink_settings(has_run_dir=any(section.enabled for section in outputs))


ConfigSource = TrainmonConfig | Mapping[str, Any] | str | os.PathLike[str] | None

SECTIONS: dict[str, type] = {
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(TrainmonConfig)
    if f.default_factory is not dataclasses.MISSING and f.name != "raw"
}
TOP_LEVEL_KEYS = [f.name for f in dataclasses.fields(TrainmonConfig) if "doc" in f.metadata]
