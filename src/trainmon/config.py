"""Typed monitoring config that accepts a DeepSpeed config as-is.

Keys trainmon does not own (``optimizer``, ``zero_optimization``, ``fp16``, ...) are kept in
:attr:`TrainmonConfig.raw` and ignored. Inside the sections trainmon owns, every key is
checked: an unknown key or a wrong type is a :class:`~trainmon.errors.ConfigError` that names
the full key path, the value, the expected type and the closest valid key.

Every section, alert rule and alert sink is a :class:`~trainmon.schema.Settings` dataclass
whose fields declare their documentation, range and choices (:func:`~trainmon.schema.setting`):
one checker applies them, and the README's reference table is generated from them. Rules that
tie several fields together are each class's ``check()``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal as signals
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from trainmon import redact
from trainmon.errors import ConfigError, did_you_mean
from trainmon.schema import (
    ENV_VAR,
    EXISTING_FILE,
    HTTP_URL,
    INNER_FOLDER,
    PATH,
    SettingError,
    Settings,
    build,
    construct,
    default_of,
    expected,
    fields_of,
    is_required,
    pattern_form,
    setting,
    without_null,
)

DEFAULT_JOB_NAME = "DeepSpeedJobName"


@dataclass(frozen=True)
class OutputSection(Settings):
    """Shape shared by DeepSpeed's ``tensorboard`` / ``csv_monitor`` and trainmon's ``jsonl``."""

    enabled: bool = setting("Turn this writer on.", default=False)
    output_path: str = setting(
        'Base folder; "" means the current directory (DeepSpeed\'s default).',
        default="",
        form=PATH,
    )
    job_name: str = setting(
        "Sub-folder of output_path for this run (DeepSpeed's default).",
        default=DEFAULT_JOB_NAME,
        form=INNER_FOLDER,
    )
    every: Literal["step", "window"] = setting(
        "Write every step's values, or one value per window (the window mean at its last step).",
        default="step",
    )

    def job_dir(self) -> Path:
        """``<output_path>/<job_name>``, as DeepSpeed lays it out (shared by every rank)."""
        return Path(self.output_path or ".") / self.job_name


@dataclass(frozen=True)
class TensorBoardConfig(OutputSection):
    """TensorBoard event files in ``<output_path>/<job_name>/``."""

    KEY: ClassVar[str] = "tensorboard"


@dataclass(frozen=True)
class CsvMonitorConfig(OutputSection):
    """One CSV per metric in ``<output_path>/<job_name>/``, DeepSpeed's ``csv_monitor`` layout."""

    KEY: ClassVar[str] = "csv_monitor"


@dataclass(frozen=True)
class JsonlConfig(OutputSection):
    """Append-only journal ``<output_path>/<job_name>/metrics.jsonl`` (trainmon's own section)."""

    KEY: ClassVar[str] = "jsonl"


@dataclass(frozen=True)
class ConsoleConfig(Settings):
    """One readable line every ``steps_per_print`` steps, on the writing rank."""

    KEY: ClassVar[str] = "console"

    enabled: bool = setting("Print progress lines.", default=True)
    stream: Literal["stdout", "stderr"] = setting("Where the lines go.", default="stdout")
    live: Literal["auto", "on", "off"] = setting(
        'One live progress line, rewritten in place between window lines: "auto" when the '
        "stream is an interactive terminal (never for files, pipes or log collectors).",
        default="auto",
    )


@dataclass(frozen=True)
class WandbConfig(Settings):
    """Weights & Biases run settings (DeepSpeed's keys)."""

    KEY: ClassVar[str] = "wandb"

    enabled: bool = setting("Turn the W&B writer on.", default=False)
    project: str = setting("W&B project.", default="deepspeed")
    group: str | None = setting("W&B group (per-rank runs share it).", default=None)
    team: str | None = setting("W&B team (DeepSpeed's name for entity).", default=None)
    entity: str | None = setting("W&B entity; an alias of team.", default=None)
    name: str | None = setting("Run name.", default=None)
    tags: list[str] = setting("Run tags.", default_factory=list)
    mode: Literal["online", "offline", "disabled"] | None = setting(
        "null: WANDB_MODE, else online with an API key, else offline with a warning.",
        default=None,
    )
    dir: str | None = setting("Folder for W&B's local files.", default=None)
    id: str | None = setting("Run id, to resume a run.", default=None)
    resume: Literal["allow", "must", "never", "auto"] | None = setting(
        "W&B resume policy.", default=None
    )
    config: dict[str, Any] = setting(
        "Hyper-parameters recorded with the run.", default_factory=dict
    )

    def check(self) -> None:
        """team and entity are two names for one thing: given both, they must agree."""
        if self.team and self.entity and self.team != self.entity:
            raise SettingError(
                None,
                f"'$path.team' = {self.team!r} and '$path.entity' = {self.entity!r} disagree: "
                "they are two names for the W&B entity; set only one of them",
            )


@dataclass(frozen=True)
class CometConfig(Settings):
    """Comet experiment settings (DeepSpeed's keys)."""

    KEY: ClassVar[str] = "comet"

    enabled: bool = setting("Turn the Comet writer on.", default=False)
    samples_log_interval: int = setting("Log every N samples.", default=100, ge=0)
    project: str | None = setting("Comet project.", default=None)
    workspace: str | None = setting("Comet workspace.", default=None)
    api_key: str | None = setting("Comet API key.", default=None)
    experiment_name: str | None = setting("Experiment name.", default=None)
    experiment_key: str | None = setting("Experiment key.", default=None)
    online: bool | None = setting("Online or offline experiment.", default=None)
    mode: str | None = setting("Comet start mode.", default=None)


_METRIC_PREFIX = pattern_form(
    'letters, digits and _ not starting with a digit (a Prometheus metric name prefix), or ""',
    re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*").fullmatch,
)


@dataclass(frozen=True)
class PrometheusConfig(Settings):
    """Latest metric values for Prometheus: an exporter it scrapes, and/or a Pushgateway.

    Trainmon's own section (key ``prometheus``); see :mod:`trainmon.writers.prometheus`.
    """

    KEY: ClassVar[str] = "prometheus"

    enabled: bool = setting("Turn the Prometheus writer on.", default=False)
    serve: bool = setting(
        "Serve the latest value of every metric at http://host:port/metrics for Prometheus "
        "to scrape.",
        default=True,
    )
    host: str = setting(
        'Address the exporter listens on: loopback unless you name another ("0.0.0.0": all).',
        default="127.0.0.1",
        nonempty=True,
        example="'127.0.0.1'",
    )
    port: int = setting(
        "Exporter port; with trainmon.per_rank_output each rank serves on port + LOCAL_RANK; "
        "0 lets the system pick a free one.",
        default=9400,
        ge=0,
        le=65535,
    )
    namespace: str = setting(
        "Prefix of every metric name: train/loss is served as trainmon_train_loss.",
        default="trainmon",
        form=_METRIC_PREFIX,
    )
    job: str | None = setting(
        "The job label and Pushgateway grouping key; null means the run's name (see Run identity).",
        default=None,
        nonempty=True,
    )
    pushgateway_url: str | None = setting(
        "Also push to this Pushgateway (e.g. http://pushgateway:9091), grouped by job and rank; "
        "null means no push.",
        default=None,
        nonempty=True,
        example="'http://pushgateway:9091'",
    )
    push_interval_s: float = setting(
        "Push new values at most this often, and once more at close; 0 pushes at every flush.",
        default=15.0,
        ge=0,
        unit="seconds",
    )
    delete_on_close: bool = setting(
        "Delete this job and rank's group from the Pushgateway at close (after the last push).",
        default=False,
    )
    timeout_s: float = setting(
        "Longest wait for one Pushgateway request; a failed push is counted, and its values "
        "go with the next one.",
        default=2.0,
        ge=1e-3,
        unit="seconds",
    )


@dataclass(frozen=True)
class MlflowConfig(Settings):
    """MLflow tracking: one run per writing rank (trainmon's own section, key ``mlflow``)."""

    KEY: ClassVar[str] = "mlflow"

    enabled: bool = setting("Turn the MLflow writer on.", default=False)
    tracking_uri: str | None = setting(
        "Where runs go: a server URL, sqlite:///path.db, ...; null means MLFLOW_TRACKING_URI, "
        "else MLflow's default.",
        default=None,
        nonempty=True,
    )
    experiment: str | None = setting(
        "Experiment name, created when missing; null means MLFLOW_EXPERIMENT_NAME, else "
        "MLflow's Default experiment.",
        default=None,
        nonempty=True,
    )
    run_name: str | None = setting(
        "Run name; null means the run's name (see Run identity).", default=None, nonempty=True
    )
    run_id: str | None = setting(
        "Log into this existing run (to resume it) instead of starting a new one.",
        default=None,
        nonempty=True,
    )
    tags: dict[str, Any] = setting(
        "Tags set on the run (values stored as text).", default_factory=dict
    )
    params: dict[str, Any] = setting(
        "Parameters recorded with the run (values stored as text).", default_factory=dict
    )


@dataclass(frozen=True)
class PipelineConfig(Settings):
    """How the background pipeline queues and flushes (key ``trainmon``)."""

    KEY: ClassVar[str] = "trainmon"

    queue_size: int = setting(
        "Most events waiting for the background thread.", default=200_000, ge=1
    )
    when_full: Literal["wait", "drop"] = setting(
        'Queue full: "wait" up to full_wait_s then drop with a warning, or "drop" at once; '
        "drops are counted in trainmon/dropped_events.",
        default="wait",
    )
    full_wait_s: float = setting(
        "Longest wait for queue space before dropping.", default=1.0, ge=0, unit="seconds"
    )
    flush_interval_s: float = setting(
        "Writers push to disk at least this often; a kill -9 loses at most this much.",
        default=1.0,
        ge=0,
        unit="seconds",
    )
    window_steps: int | None = setting(
        "Steps per aggregation window; null means steps_per_print.", default=None, ge=1
    )
    window_seconds: float | None = setting(
        "Close a window after this many seconds instead of a number of steps "
        "(windows then differ between ranks, so cross-rank statistics are off).",
        default=None,
        ge=0,
        unit="seconds",
    )
    per_rank_output: bool = setting(
        "Every rank writes, each into <output_path>/<job_name>/rank-<r>/.", default=False
    )
    log_rank: int | Literal["last"] = setting(
        'The rank that writes (without per_rank_output) and evaluates alerts; "last" is '
        "world_size - 1, where the loss lives under pipeline parallelism.",
        default=0,
        ge=0,
    )
    cross_rank: Literal["auto", "on", "off"] = setting(
        'Gather per-rank window statistics on the logging rank (one collective per window); "auto" '
        "turns it on under trainmon.initialize, where every rank logs every step.",
        default="auto",
    )
    collective_timeout_s: float = setting(
        "Longest wait for other ranks in a monitoring collective before giving up on it.",
        default=60.0,
        ge=0,
        unit="seconds",
    )
    close_timeout_s: float = setting(
        "Longest close() (and so process exit) waits for writers and alert sinks to finish; "
        "what they did not deliver by then is listed in one warning.",
        default=5.0,
        ge=0,
        unit="seconds",
    )
    layer_stats: bool = setting(
        "trainmon.initialize: log layers/<group>/grad_norm, weight_norm and update_ratio at each "
        "window end (any loop: Monitor.watch_layers), and name the groups that moved most in "
        "spike, growth and non_finite alerts.",
        default=False,
    )
    layer_stats_depth: int | None = setting(
        "Name components per layer group (blocks.11.attn is 3); null means top-level blocks "
        "(blocks.11, fc1).",
        default=None,
        ge=1,
    )
    total_steps: int | None = setting(
        "Steps the run will take, for the console's progress and ETA (step 500/2000 (25%) · "
        "elapsed · ETA); null means scheduler.params.total_num_steps, or "
        "Monitor.set_total_steps(), else no ETA.",
        default=None,
        ge=1,
    )


@dataclass(frozen=True)
class CommsLoggerConfig(Settings):
    """DeepSpeed's ``comms_logger``: per-collective counts, sizes, latency and bandwidth."""

    KEY: ClassVar[str] = "comms_logger"

    enabled: bool = setting("Record collectives (false really means off).", default=False)
    verbose: bool = setting("Log every collective as it completes.", default=False)
    prof_all: bool = setting("Record every collective (else only prof_ops).", default=True)
    prof_ops: list[str] = setting(
        'Collectives to record when prof_all is false, e.g. ["all_reduce"].', default_factory=list
    )
    debug: bool = setting("Include the caller's function name in verbose lines.", default=False)


@dataclass(frozen=True)
class ThroughputConfig(Settings):
    """What a sample is worth, so samples/s can become tokens/s, TFLOPS and MFU.

    (A zero, negative or NaN peak would divide by zero, or lie, inside engine.step().)
    """

    KEY: ClassVar[str] = "throughput"

    tokens_per_sample: int | None = setting(
        "Tokens in one sample (sequence length).", default=None, ge=1
    )
    flops_per_sample: float | None = setting(
        "FLOPs of forward+backward for one sample (e.g. 6 x parameters x tokens).",
        default=None,
        gt=0,
    )
    peak_tflops: float | None = setting(
        "Peak TFLOPS of one device for MFU; null looks the accelerator up in a known table.",
        default=None,
        gt=0,
    )


@dataclass(frozen=True)
class SystemMetricsConfig(Settings):
    """``sys/*`` metrics (CPU, memory, disk, network, GPU) sampled by a thread of each process."""

    KEY: ClassVar[str] = "system_metrics"

    enabled: bool = setting("Sample system metrics in the background.", default=True)
    interval_s: float = setting(
        "Seconds between samples (each joins the stream at the current step).",
        default=10.0,
        ge=0.01,
        le=86400,
        unit="seconds",
    )


@dataclass(frozen=True)
class ProfilerConfig(Settings):
    """torch.profiler on demand: a signal or a file named ``profile`` in the run folder."""

    KEY: ClassVar[str] = "profiler"

    enabled: bool = setting("Listen for profile requests.", default=True)
    steps: int = setting("Steps profiled per request.", default=5, ge=1, le=10_000)
    signal: str | None = setting(
        'Signal that requests a profile (kill -USR2 <pid>); null: only the "profile" file.',
        default="SIGUSR2",
        nonempty=True,
    )

    def check(self) -> None:
        """The signal must be one this platform has, and not one that ends or stops a process."""
        if self.signal is None:
            return
        if self.signal in ("SIGKILL", "SIGSTOP", "SIGINT", "SIGTERM") or not isinstance(
            getattr(signals, self.signal, None), signals.Signals
        ):
            raise SettingError(
                "signal",
                "expected a signal name this platform has, such as 'SIGUSR2' or 'SIGUSR1' "
                "(not SIGKILL, SIGSTOP, SIGINT or SIGTERM)",
                self.signal,
            )


# ---- alerts -----------------------------------------------------------------------------------

ALERT_KINDS = ("threshold", "non_finite", "spike", "drop", "growth", "stall")
ALERT_OPS = (">", ">=", "<", "<=", "==", "!=")
AlertKind = Literal["threshold", "non_finite", "spike", "drop", "growth", "stall"]


@dataclass(frozen=True)
class AlertRuleConfig(Settings):
    """One alert rule, checked: what it watches, when it fires, and what firing does.

    Built from one entry of ``alerts.rules`` by :func:`parse_alert_rules`; the meaning of each
    kind is documented in :mod:`trainmon.alerts.rules`.
    """

    KEY: ClassVar[str] = "alerts.rules[]"

    name: str = setting("Unique name of the rule; also the metric alerts/<name>.", nonempty=True)
    kind: AlertKind = setting(
        "threshold, non_finite, spike, drop, growth or stall; threshold when op is given.",
        default="threshold",
    )
    metric: str | None = setting(
        "The metric watched, e.g. train/loss (every kind but stall).",
        default=None,
        nonempty=True,
        example="'train/loss'",
    )
    op: Literal[">", ">=", "<", "<=", "==", "!="] | None = setting(
        "threshold: how the value is compared with threshold.", default=None
    )
    threshold: float | None = setting(
        "threshold: the value compared against.", default=None, infinite=True
    )
    for_steps: int = setting(
        "threshold, non_finite, spike, drop: consecutive steps the condition must hold.",
        default=1,
        ge=1,
    )
    factor: float | None = setting(
        "spike: fire when value > factor x baseline.", default=None, gt=1
    )
    percent: float | None = setting(
        "drop: fire when value < baseline x (1 - percent / 100).", default=None, gt=0, lt=100
    )
    window: int = setting(
        "spike, drop: how many recent values make the baseline.", default=100, ge=2
    )
    baseline: Literal["median", "mean"] = setting(
        "spike, drop: the baseline is the median (default) or the mean of the window.",
        default="median",
    )
    min_samples: int | None = setting(
        "spike, drop: values needed before the rule can fire (at most window); null means "
        "min(10, window).",
        default=None,
        ge=1,
    )
    windows: int = setting(
        "growth: fire when the window mean rose in each of this many consecutive windows.",
        default=5,
        ge=1,
    )
    seconds: float | None = setting(
        "stall: fire when no step completed for this long.", default=None, gt=0, unit="seconds"
    )
    multiple: float | None = setting(
        "stall: fire when no step completed for multiple x the recent median step interval.",
        default=None,
        gt=1,
    )
    severity: Literal["info", "warning", "critical"] = setting(
        "How urgent the alert is; when not given, critical for a non_finite rule on a loss "
        "(see default_severity), else warning.",
        default="warning",
    )
    action: Literal["alert", "stop"] = setting(
        'Only alert, or also ask training to stop ("stop": TrainingStopped at the next step).',
        default="alert",
    )
    cooldown_s: float = setting(
        "While the condition lasts, send the alert again after this many seconds; a re-fire "
        "this soon after the last firing notification (after a resolve) is not sent, only "
        "counted in alerts/<name>.",
        default=300.0,
        ge=0,
        unit="seconds",
    )
    resolve_after: int | None = setting(
        "Consecutive clear verdicts (steps; windows for growth) before a firing alert "
        "resolves; null means one window (trainmon.window_steps or steps_per_print) for "
        "per-step rules, 1 for growth and stall.",
        default=None,
        ge=1,
    )
    resolve_after_s: float = setting(
        "And the condition must have been clear for at least this long before it resolves.",
        default=0.0,
        ge=0,
        unit="seconds",
    )
    labels: dict[str, str] = setting("Extra labels copied into every alert.", default_factory=dict)

    def check(self) -> None:
        """min_samples fits in the window; a stall rule has a limit."""
        if self.min_samples is not None and self.min_samples > self.window:
            raise SettingError(
                "min_samples",
                f"expected an integer from 1 to window ({self.window})",
                self.min_samples,
            )
        if self.kind == "stall" and self.seconds is None and self.multiple is None:
            raise SettingError(
                None,
                "a stall rule needs '$path.seconds' (no step for that long) or "
                "'$path.multiple' (no step for that many median step intervals), or both",
            )


def default_severity(kind: str, metric: str | None) -> Literal["warning", "critical"]:
    """A rule's severity when it names none: ``critical`` for ``non_finite`` on a loss.

    A NaN or infinite loss (``train/loss``, ``eval/loss``, ``train/lm_loss``; not
    ``train/loss_scale``) means the weights are about to be, or already are, ruined;
    everything else defaults to ``warning``.
    """
    last = (metric or "").rsplit("/", 1)[-1].lower()
    if kind == "non_finite" and "loss" in last and "scale" not in last:
        return "critical"
    return "warning"


_RULE_COMMON = (
    "name",
    "kind",
    "severity",
    "action",
    "cooldown_s",
    "resolve_after",
    "resolve_after_s",
    "labels",
)
_RULE_KEYS: dict[str, tuple[str, ...]] = {
    "threshold": ("metric", "op", "threshold", "for_steps"),
    "non_finite": ("metric", "for_steps"),
    "spike": ("metric", "factor", "window", "baseline", "min_samples", "for_steps"),
    "drop": ("metric", "percent", "window", "baseline", "min_samples", "for_steps"),
    "growth": ("metric", "windows"),
    "stall": ("seconds", "multiple"),
}
_RULE_REQUIRED: dict[str, tuple[str, ...]] = {
    "threshold": ("metric", "op", "threshold"),
    "non_finite": ("metric",),
    "spike": ("metric", "factor"),
    "drop": ("metric", "percent"),
    "growth": ("metric",),
    "stall": (),
}
_RULE_EXAMPLE = (
    '{"name": "grad-explosion", "metric": "train/grad_norm", "op": ">", "threshold": 10}'
)


def parse_alert_rules(rules: Sequence[Any]) -> tuple[AlertRuleConfig, ...]:
    """Check every entry of ``alerts.rules`` and build its :class:`AlertRuleConfig`.

    A bad entry raises :class:`ConfigError` naming the rule (its index and name), the key, the
    value and what was expected: unknown kind or key (with the closest valid one), a missing
    required key, a wrong type or range, a key of another kind, a duplicate name.
    """
    parsed: list[AlertRuleConfig] = []
    names: dict[str, int] = {}
    for index, entry in enumerate(rules):
        rule = _parse_alert_rule(index, entry)
        if rule.name in names:
            raise ConfigError(
                f"rule {rule.name!r}: 'alerts.rules[{index}].name' = {rule.name!r} is already "
                f"the name of alerts.rules[{names[rule.name]}]; rule names must be unique "
                f"(each is also the metric alerts/<name>)"
            )
        names[rule.name] = index
        parsed.append(rule)
    return tuple(parsed)


def _parse_alert_rule(index: int, entry: Any) -> AlertRuleConfig:
    """Which keys a rule may and must have depends on its kind; the values are checked by
    :class:`AlertRuleConfig` itself."""
    path = f"alerts.rules[{index}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{path!r} = {entry!r}: expected a mapping such as {_RULE_EXAMPLE}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        what = "is missing" if name is None else f"= {name!r}"
        raise ConfigError(
            f"'{path}.name' {what}: every rule needs a unique non-empty name, e.g. {_RULE_EXAMPLE}"
        )
    where = f"rule {name!r}"
    kind = entry.get("kind")
    if kind is None:
        if "op" not in entry:
            raise ConfigError(
                f"{where}: '{path}.kind' is missing: expected one of {', '.join(ALERT_KINDS)} "
                f"(a rule with 'op' and 'threshold' is a threshold rule)"
            )
        kind = "threshold"
    elif kind not in ALERT_KINDS:
        extra = did_you_mean(str(kind), ALERT_KINDS, start="; ")
        raise ConfigError(
            f"{where}: '{path}.kind' = {kind!r}: expected one of {', '.join(ALERT_KINDS)}{extra}"
        )
    valid = (*_RULE_COMMON, *_RULE_KEYS[kind])
    for key in entry:
        if key in valid:
            continue
        owners = [k for k, keys in _RULE_KEYS.items() if key in keys]
        if owners:
            raise ConfigError(
                f"{where}: '{path}.{key}' does not apply to kind {kind!r} (it is a key of "
                f"{', '.join(owners)}); valid keys for {kind!r}: {', '.join(valid)}"
            )
        every = sorted({*_RULE_COMMON, *(k for keys in _RULE_KEYS.values() for k in keys)})
        suggestion = did_you_mean(key, valid, cutoff=0.5, end=" ") or did_you_mean(
            key, every, cutoff=0.5, end=" "
        )
        raise ConfigError(
            f"{where}: unknown key '{path}.{key}'; {suggestion}valid keys for {kind!r}: "
            f"{', '.join(valid)}"
        )
    for key in _RULE_REQUIRED[kind]:
        if entry.get(key) is None:
            raise ConfigError(f"{where}: '{path}.{key}' is missing: a {kind} rule needs it")
    for key, value in entry.items():  # a key given in a rule must have a value
        if value is None:
            tp, limits = _RULE_FIELDS[key]
            raise ConfigError(
                f"{where}: '{path}.{key}' = None: expected {expected(without_null(tp), limits)}"
            )
    kwargs = {**entry, "kind": kind}
    if "severity" not in kwargs:
        kwargs["severity"] = default_severity(kind, kwargs.get("metric"))
    return construct(AlertRuleConfig, kwargs, path, prefix=f"{where}: ")


_RULE_FIELDS = {name: (tp, limits) for name, tp, limits in fields_of(AlertRuleConfig)}


# ---- alert sinks: one settings class per type -------------------------------------------------

WebhookFormat = Literal["json", "slack", "dingtalk", "feishu"]
SmtpSecurity = Literal["plain", "starttls", "ssl"]


@dataclass(frozen=True)
class ConsoleSinkSettings(Settings):
    """``{"type": "console"}``: one line per alert on stderr, through the trainmon logger."""

    KEY: ClassVar[str] = "alerts.sinks[type=console]"


@dataclass(frozen=True)
class FileSinkSettings(Settings):
    """``{"type": "file"}``: one JSON line per alert."""

    KEY: ClassVar[str] = "alerts.sinks[type=file]"

    path: str | None = setting(
        "The alerts file; a relative path (or a folder, ending in /) is inside the run folder; "
        "null means <run folder>/alerts.jsonl.",
        default=None,
        nonempty=True,
    )


@dataclass(frozen=True)
class WebhookSinkSettings(Settings):
    """``{"type": "webhook"}``: a POST per alert, as plain JSON or a chat app's message."""

    KEY: ClassVar[str] = "alerts.sinks[type=webhook]"

    url: str = setting(
        "Where alerts are POSTed.",
        form=HTTP_URL,
        example='"https://hooks.slack.com/services/T000/B000/XXXX"',
    )
    format: WebhookFormat = setting(
        "The message body: trainmon's JSON, or a Slack, DingTalk or Feishu message.",
        default="json",
    )
    secret_env: str | None = setting(
        "dingtalk, feishu: the environment variable holding the signing secret.",
        default=None,
        form=ENV_VAR,
    )
    msgtype: Literal["markdown", "text"] | None = setting(
        "dingtalk: the message type; null means markdown.", default=None
    )
    headers: dict[str, str] = setting(
        "Extra HTTP headers.", default_factory=dict, example='{"X-Token": "..."}'
    )
    timeout_s: float = setting("Longest wait for one request.", default=5.0, gt=0, unit="seconds")

    def check(self) -> None:
        """secret_env and msgtype belong to the formats that use them."""
        if self.secret_env is not None and self.format not in ("dingtalk", "feishu"):
            raise SettingError(
                "secret_env",
                "expected no secret: only the dingtalk and feishu formats sign messages",
                self.secret_env,
            )
        if self.msgtype is not None and self.format != "dingtalk":
            raise SettingError(
                "msgtype",
                "expected no msgtype: it is a setting of the dingtalk format",
                self.msgtype,
            )


@dataclass(frozen=True)
class EmailSinkSettings(Settings):
    """``{"type": "email"}``: an e-mail per alert over SMTP (credentials from the environment)."""

    KEY: ClassVar[str] = "alerts.sinks[type=email]"

    host: str = setting("SMTP server.", nonempty=True, example='"smtp.example.com"')
    sender: str = setting("From address.", nonempty=True, example='"trainmon@example.com"')
    to: list[str] = setting("Recipients.", nonempty=True, example='["oncall@example.com"]')
    port: int | None = setting(
        "SMTP port; null means 25, 587 or 465 by security.", default=None, ge=1, le=65535
    )
    security: SmtpSecurity = setting("How the connection is protected.", default="starttls")
    username_env: str | None = setting(
        "The environment variable holding the login name (with password_env).",
        default=None,
        form=ENV_VAR,
    )
    password_env: str | None = setting(
        "The environment variable holding the password (with username_env).",
        default=None,
        form=ENV_VAR,
    )
    tls_verify: bool = setting("Verify the server's certificate.", default=True)
    ca_file: str | None = setting(
        "PEM file of CA certificates to verify the server with.",
        default=None,
        form=EXISTING_FILE,
    )
    timeout_s: float = setting(
        "Longest wait for the SMTP server.", default=10.0, gt=0, unit="seconds"
    )

    def check(self) -> None:
        """A login needs both a user name and a password."""
        if (self.username_env is None) != (self.password_env is None):
            key, example = (
                ("password_env", "SMTP_PASSWORD")
                if self.password_env is None
                else ("username_env", "SMTP_USER")
            )
            raise SettingError(
                key,
                f'is missing: an email sink needs it, e.g. "{example}" (login needs both '
                "username_env and password_env)",
            )


@dataclass(frozen=True)
class PushgatewaySinkSettings(Settings):
    """``{"type": "pushgateway"}``: gauge trainmon_alert{rule, severity}, 1 while firing."""

    KEY: ClassVar[str] = "alerts.sinks[type=pushgateway]"

    url: str = setting("The Pushgateway.", form=HTTP_URL, example='"http://pushgateway:9091"')
    job: str | None = setting(
        "The grouping job; null means the run's name.", default=None, nonempty=True
    )
    timeout_s: float = setting("Longest wait for one request.", default=5.0, gt=0, unit="seconds")


@dataclass(frozen=True)
class AlertmanagerSinkSettings(Settings):
    """``{"type": "alertmanager"}``: POST /api/v2/alerts; resolved alerts get endsAt = now."""

    KEY: ClassVar[str] = "alerts.sinks[type=alertmanager]"

    url: str = setting("The Alertmanager.", form=HTTP_URL, example='"http://alertmanager:9093"')
    timeout_s: float = setting("Longest wait for one request.", default=5.0, gt=0, unit="seconds")


SinkSettings = (
    ConsoleSinkSettings
    | FileSinkSettings
    | WebhookSinkSettings
    | EmailSinkSettings
    | PushgatewaySinkSettings
    | AlertmanagerSinkSettings
)
#: Sink ``type`` → its settings class.
SINK_SETTINGS: dict[str, type[SinkSettings]] = {
    "console": ConsoleSinkSettings,
    "file": FileSinkSettings,
    "webhook": WebhookSinkSettings,
    "email": EmailSinkSettings,
    "pushgateway": PushgatewaySinkSettings,
    "alertmanager": AlertmanagerSinkSettings,
}
SINK_TYPES = tuple(SINK_SETTINGS)


def parse_sinks(sinks: Any, *, has_run_dir: bool = True) -> tuple[SinkSettings, ...]:
    """Check the ``alerts.sinks`` entries and build their settings (nothing is sent).

    A mistake is a :class:`ConfigError` naming ``alerts.sinks[i].<key>``. ``has_run_dir``:
    whether there is a run folder for a file sink without a path.
    """
    if isinstance(sinks, (str, bytes)) or not isinstance(sinks, Sequence):
        raise ConfigError(
            f"'alerts.sinks' = {sinks!r}: expected a list of sink settings, "
            f'e.g. [{{"type": "console"}}]'
        )
    return tuple(_parse_sink(i, raw, has_run_dir) for i, raw in enumerate(sinks))


def _parse_sink(index: int, raw: Any, has_run_dir: bool) -> SinkSettings:
    path = f"alerts.sinks[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"'{path}' = {redact.shown(raw)}: expected a mapping with a 'type' "
            f"(one of {', '.join(SINK_TYPES)})"
        )
    kind = raw.get("type")
    if kind is None:
        raise ConfigError(f"'{path}.type' is missing: expected one of {', '.join(SINK_TYPES)}")
    if kind not in SINK_SETTINGS:
        extra = did_you_mean(str(kind), SINK_TYPES, cutoff=0.5, end=" ")
        raise ConfigError(
            f"'{path}.type' = {kind!r}: unknown sink type; {extra}"
            f"valid types: {', '.join(SINK_TYPES)}"
        )
    owner = ("an " if kind[0] in "aeiou" else "a ") + f"{kind} sink"
    rest = {k: v for k, v in raw.items() if k != "type"}
    settings = build(SINK_SETTINGS[kind], rest, path, owner=owner, extra_keys=("type",))
    if isinstance(settings, FileSinkSettings) and settings.path is None and not has_run_dir:
        raise ConfigError(
            f"'{path}.path' is missing and there is no run folder to put alerts.jsonl in "
            f"(no jsonl/tensorboard/csv output is enabled); set a path"
        )
    return settings


@dataclass(frozen=True)
class AlertsConfig(Settings):
    """Alert rules and the sinks that deliver alerts (trainmon's own section, key ``alerts``).

    Rules and sinks are checked when the config is loaded: a bad one is a
    :class:`ConfigError` naming it.
    """

    KEY: ClassVar[str] = "alerts"

    rules: list[dict[str, Any]] = setting(
        "Alert rules, each a mapping with the alerts.rules[] keys below.",
        default_factory=list,
    )
    sinks: list[dict[str, Any]] = setting(
        "Where alerts go, each a mapping with a type and that type's alerts.sinks[] keys below.",
        default_factory=lambda: [{"type": "console"}],
    )
    health_checks: bool = setting(
        "Built-in checks that need no rule: one console warning, naming the metric and the "
        "first step, when train/loss or train/grad_norm is NaN or infinite.",
        default=True,
    )

    def check(self) -> None:
        """Each rule and sink is checked by its own settings class."""
        parse_alert_rules(self.rules)
        parse_sinks(self.sinks)

    def rule_configs(self) -> tuple[AlertRuleConfig, ...]:
        """The rules, checked and typed."""
        return parse_alert_rules(self.rules)

    def sink_settings(self, *, has_run_dir: bool = True) -> tuple[SinkSettings, ...]:
        """The sinks, checked and typed."""
        return parse_sinks(self.sinks, has_run_dir=has_run_dir)


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

_SECTIONS: dict[str, type] = {
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(TrainmonConfig)
    if f.default_factory is not dataclasses.MISSING and f.name != "raw"
}
_TOP_LEVEL = [f.name for f in dataclasses.fields(TrainmonConfig) if "doc" in f.metadata]


#: Top-level keys ``trainmon.initialize`` reads to build the training objects (``Monitor`` and
#: ``attach`` leave them to DeepSpeed).
ENGINE_KEYS = ("optimizer", "scheduler", "fp16", "bf16", "bfloat16")
#: Top-level keys of DeepSpeed's config that trainmon does not use (``validate`` lists them).
DEEPSPEED_KEYS = frozenset(
    {
        "activation_checkpointing", "aio", "amp", "autotuning", "checkpoint",
        "communication_data_type", "compile", "compression_training", "curriculum_learning",
        "data_efficiency", "data_types", "dataloader_drop_last", "disable_allgather",
        "disable_python_gc", "dump_state", "eigenvalue", "elasticity", "flops_profiler",
        "fp32_allreduce", "gradient_allreduce_op", "gradient_predivide_factor",
        "graph_harvesting", "hybrid_engine", "load_universal_checkpoint", "memory_breakdown",
        "mics_hierarchical_params_gather", "mics_shard_size", "nebula", "pipeline",
        "prescale_gradients", "progressive_layer_drop", "quantize_training", "seed",
        "seq_parallel_communication_data_type", "sequence_parallel_size", "sparse_attention",
        "sparse_gradients", "tensor_parallel", "timers", "torch_autocast",
        "use_data_before_expert_parallelism",
        "use_node_local_storage", "vocabulary_size", "weight_quantization",
        "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "zero_optimization",
    }
)  # fmt: skip
OPTIMIZER_TYPES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
SCHEDULER_TYPES = {"warmuplr": "WarmupLR", "warmupdecaylr": "WarmupDecayLR"}


@dataclass(frozen=True)
class ConfigCheck:
    """The verdict of :func:`check_config` on a config that loads."""

    config: TrainmonConfig
    warnings: tuple[str, ...] = ()
    """Likely mistakes that do not stop it loading: a top-level key close to a known one."""
    deepspeed_keys: tuple[str, ...] = ()
    """DeepSpeed's keys that trainmon does not use (left to DeepSpeed)."""
    engine_keys: tuple[str, ...] = ()
    """Keys only ``trainmon.initialize`` reads (optimizer, scheduler, precision)."""
    unknown_keys: tuple[str, ...] = ()
    """Keys neither trainmon nor DeepSpeed knows (those close to a known one also warn)."""


def check_config(source: ConfigSource = None, *, engine: bool = False) -> ConfigCheck:
    """The one function that decides whether a config is valid.

    ``Monitor``, ``trainmon.initialize`` (with ``engine=True``, which also checks the
    ``optimizer``, ``scheduler`` and ``fp16``/``bf16`` sections it builds) and
    ``trainmon validate`` all call it, so they give the same verdict: a mistake is a
    :class:`ConfigError` naming the key, the value and what was expected.
    """
    if isinstance(source, TrainmonConfig):
        config = source
    elif source is None:
        config = TrainmonConfig()
    elif isinstance(source, (str, os.PathLike)):
        config = _from_mapping(_read_file(Path(source)), origin=str(source))
    elif isinstance(source, Mapping):
        config = _from_mapping(source, origin="config")
    else:
        raise ConfigError(
            f"config must be a dict, a path to a JSON or YAML file, or a TrainmonConfig; "
            f"got {type(source).__name__}"
        )
    if engine:
        check_engine_sections(config.raw)
    own = {f.name for f in dataclasses.fields(TrainmonConfig)} - {"raw"}
    known = sorted(own | set(ENGINE_KEYS) | DEEPSPEED_KEYS)
    warnings = []
    unknown = []
    for key in config.raw:
        if key in own or key in ENGINE_KEYS or key in DEEPSPEED_KEYS:
            continue
        unknown.append(str(key))
        hint = did_you_mean(str(key), known, cutoff=0.8)
        if hint:
            warnings.append(
                f"top-level key {str(key)!r} is not a trainmon or DeepSpeed setting and is "
                f"ignored; {hint}"
            )
    return ConfigCheck(
        config,
        tuple(warnings),
        deepspeed_keys=tuple(sorted(k for k in config.raw if k in DEEPSPEED_KEYS)),
        engine_keys=tuple(k for k in ENGINE_KEYS if k in config.raw),
        unknown_keys=tuple(unknown),
    )


def load_config(source: ConfigSource = None, *, engine: bool = False) -> TrainmonConfig:
    """Build a :class:`TrainmonConfig` from a dict, a JSON/YAML file path, a config, or None.

    Checked by :func:`check_config`; its warnings are logged once here.
    """
    if isinstance(source, TrainmonConfig) and not engine:
        return source
    checked = check_config(source, engine=engine)
    if not isinstance(source, TrainmonConfig):
        from trainmon.logging import get_logger

        for warning in checked.warnings:
            get_logger("config").warning("%s", warning)
    return checked.config


def check_engine_sections(raw: Mapping[str, Any]) -> None:
    """Check what ``trainmon.initialize`` builds from DeepSpeed's sections, before any torch
    object exists: ``optimizer`` and ``scheduler`` types and keys, ``fp16``/``bf16``."""
    section = raw.get("optimizer")
    if section is not None:
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"'optimizer' = {section!r}: expected a mapping such as "
                f'{{"type": "AdamW", "params": {{"lr": 0.001}}}}'
            )
        kind = section.get("type")
        if not isinstance(kind, str) or kind.lower() not in OPTIMIZER_TYPES:
            extra = did_you_mean(str(kind), list(OPTIMIZER_TYPES.values()), start="; ")
            raise ConfigError(
                f"'optimizer.type' = {kind!r}: trainmon.initialize builds "
                f"{', '.join(OPTIMIZER_TYPES.values())} (any case){extra}, or pass optimizer="
            )
        if not isinstance(section.get("params", {}), Mapping):
            raise ConfigError(
                f"'optimizer.params' = {section['params']!r}: expected a mapping of arguments"
            )
    section = raw.get("scheduler")
    if section is not None:
        _check_scheduler(section)
    for key in ("fp16", "bf16", "bfloat16"):
        value = raw.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"{key!r} = {value!r}: expected a mapping such as {{'enabled': true}}"
            )


def _check_scheduler(section: Any) -> None:
    if not isinstance(section, Mapping):
        raise ConfigError(f"'scheduler' = {section!r}: expected a mapping with 'type' and 'params'")
    kind = section.get("type")
    if not isinstance(kind, str) or kind.lower() not in SCHEDULER_TYPES:
        extra = did_you_mean(str(kind), list(SCHEDULER_TYPES.values()), start="; ")
        raise ConfigError(
            f"'scheduler.type' = {kind!r}: trainmon.initialize builds "
            f"{', '.join(SCHEDULER_TYPES.values())}{extra}; for any other schedule pass "
            f"lr_scheduler="
        )
    given = section.get("params", {}) or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"'scheduler.params' = {given!r}: expected a mapping of arguments")
    decay = SCHEDULER_TYPES[kind.lower()] == "WarmupDecayLR"
    known = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"}
    known |= {"total_num_steps"} if decay else set()
    unknown = sorted(set(given) - known - {"last_batch_iteration"})
    if unknown:
        hint = did_you_mean(unknown[0], sorted(known), start="; ")
        raise ConfigError(
            f"'scheduler.params' has unknown key(s) {unknown}{hint}; valid keys: {sorted(known)}"
        )
    if given.get("warmup_type", "log") not in ("log", "linear"):
        raise ConfigError(
            f"'scheduler.params.warmup_type' = {given['warmup_type']!r}: expected 'log' or 'linear'"
        )
    if decay and "total_num_steps" not in given:
        raise ConfigError("'scheduler.params.total_num_steps' is required for WarmupDecayLR")
    for key in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"):
        value = given.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < float("inf")
        ):
            raise ConfigError(
                f"'scheduler.params.{key}' = {value!r}: expected a finite number >= 0"
            )


def _read_file(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # the parser's own message says where
        raise ConfigError(f"config file {str(path)!r} could not be parsed: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping at the top level, "
            f"got {type(data).__name__}"
        )
    return data


def _from_mapping(data: Mapping[str, Any], origin: str) -> TrainmonConfig:
    """Every section checked, and every mistake reported in one error (a section stops at its
    first mistake; the others are still checked)."""
    kwargs: dict[str, Any] = {key: data[key] for key in _TOP_LEVEL if key in data}
    errors: list[ConfigError] = []
    for key, section_type in _SECTIONS.items():
        if key in data:
            try:
                kwargs[key] = _build_section(section_type, data[key], key, origin)
            except ConfigError as error:
                errors.append(error)
    try:
        config = construct(TrainmonConfig, {**kwargs, "raw": dict(data)}, "", prefix=f"{origin}: ")
    except ConfigError as error:
        errors.append(error)
    if errors:
        raise ConfigError.of_all(errors)
    return config


def _build_section(section_type: type, value: Any, path: str, origin: str) -> Any:
    if not isinstance(value, Mapping):
        names = [f.name for f in dataclasses.fields(section_type)]
        raise ConfigError(
            f"{origin}: {path!r} = {value!r}: expected a mapping of settings "
            f"(keys: {', '.join(names)})"
        )
    return build(section_type, value, path, owner=repr(path), prefix=f"{origin}: ")


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(key, what it accepts, default, doc) for every key trainmon reads, alert rules and
    sinks included; drives the README's table."""
    rows = []
    hints = typing.get_type_hints(TrainmonConfig)
    for f in dataclasses.fields(TrainmonConfig):
        section = _SECTIONS.get(f.name)
        if section is None:
            rows += [_row("", f, hints)] if "doc" in f.metadata else []
            continue
        rows += _rows(section, f"{f.name}.")
        if section is AlertsConfig:
            for row in _rows(AlertRuleConfig, "alerts.rules[]."):
                name = row[0].rsplit(".", 1)[-1]
                kinds = [kind for kind, keys in _RULE_REQUIRED.items() if name in keys]
                rows.append(
                    (*row[:2], f"(required by {', '.join(kinds)})", row[3]) if kinds else row
                )
            types = "one of " + ", ".join(map(repr, SINK_TYPES))
            rows.append(("alerts.sinks[].type", types, "(required)", "The kind of sink."))
            for kind, sink in SINK_SETTINGS.items():
                rows += _rows(sink, f"alerts.sinks[type={kind}].")
    return rows


def _rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    hints = typing.get_type_hints(cls)
    return [_row(prefix, f, hints) for f in dataclasses.fields(cls) if "doc" in f.metadata]


def _row(
    prefix: str, f: dataclasses.Field[Any], hints: dict[str, Any]
) -> tuple[str, str, str, str]:
    default = "(required)" if is_required(f) else repr(default_of(f))
    return (
        prefix + f.name,
        expected(hints[f.name], f.metadata["limits"]),
        default,
        f.metadata["doc"],
    )
