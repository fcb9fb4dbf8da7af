"""Typed monitoring config that accepts a DeepSpeed config as-is.

Keys trainmon does not own (``optimizer``, ``zero_optimization``, ``fp16``, ...) are kept in
:attr:`TrainmonConfig.raw` and ignored. Inside the sections trainmon owns, every key is
checked: an unknown key or a wrong type is a :class:`~trainmon.errors.ConfigError` that names
the full key path, the value, the expected type and the closest valid key.

Every section, alert rule and alert sink is a :class:`~trainmon.schema.Settings` dataclass
whose fields declare their documentation, range and choices (:func:`~trainmon.schema.setting`):
one checker applies them, and the docs' config reference is generated from them. Rules that
tie several fields together are each class's ``check()``.

The package: :mod:`.sections` (one Settings class per section), :mod:`.alerting` (rules, sinks),
:mod:`.model` (the whole config), :mod:`.deepspeed` (DeepSpeed compatibility) and
:mod:`.loader` (the one pass that parses and checks).
"""

from __future__ import annotations

from trainmon.config.alerting import (
    ALERT_KINDS,
    ALERT_OPS,
    RULE_REQUIRED,
    SINK_SETTINGS,
    SINK_TYPES,
    AlertKind,
    AlertmanagerSinkSettings,
    AlertRuleConfig,
    AlertsConfig,
    ConsoleSinkSettings,
    EmailSinkSettings,
    FileSinkSettings,
    PushgatewaySinkSettings,
    SinkSettings,
    SmtpSecurity,
    WebhookFormat,
    WebhookSinkSettings,
    default_severity,
    parse_alert_rules,
    parse_sinks,
)
from trainmon.config.deepspeed import (
    DEEPSPEED_KEYS,
    ENGINE_KEYS,
    OPTIMIZER_TYPES,
    SCHEDULER_TYPES,
    check_engine_sections,
)
from trainmon.config.loader import (
    ConfigCheck,
    check_config,
    load_config,
    reference_rows,
)
from trainmon.config.model import (
    SECTIONS,
    TOP_LEVEL_KEYS,
    ConfigSource,
    TrainmonConfig,
)
from trainmon.config.sections import (
    DEFAULT_JOB_NAME,
    CometConfig,
    CommsLoggerConfig,
    ConsoleConfig,
    CsvMonitorConfig,
    JsonlConfig,
    MlflowConfig,
    OutputSection,
    PipelineConfig,
    ProfilerConfig,
    PrometheusConfig,
    SystemMetricsConfig,
    TensorBoardConfig,
    ThroughputConfig,
    WandbConfig,
)

__all__ = [
    "ALERT_KINDS",
    "ALERT_OPS",
    "DEEPSPEED_KEYS",
    "DEFAULT_JOB_NAME",
    "ENGINE_KEYS",
    "OPTIMIZER_TYPES",
    "RULE_REQUIRED",
    "SCHEDULER_TYPES",
    "SECTIONS",
    "SINK_SETTINGS",
    "SINK_TYPES",
    "TOP_LEVEL_KEYS",
    "AlertKind",
    "AlertRuleConfig",
    "AlertmanagerSinkSettings",
    "AlertsConfig",
    "CometConfig",
    "CommsLoggerConfig",
    "ConfigCheck",
    "ConfigSource",
    "ConsoleConfig",
    "ConsoleSinkSettings",
    "CsvMonitorConfig",
    "EmailSinkSettings",
    "FileSinkSettings",
    "JsonlConfig",
    "MlflowConfig",
    "OutputSection",
    "PipelineConfig",
    "ProfilerConfig",
    "PrometheusConfig",
    "PushgatewaySinkSettings",
    "SinkSettings",
    "SmtpSecurity",
    "SystemMetricsConfig",
    "TensorBoardConfig",
    "ThroughputConfig",
    "TrainmonConfig",
    "WandbConfig",
    "WebhookFormat",
    "WebhookSinkSettings",
    "check_config",
    "check_engine_sections",
    "default_severity",
    "load_config",
    "parse_alert_rules",
    "parse_sinks",
    "reference_rows",
]
