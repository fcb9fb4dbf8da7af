"""Typed monitoring config that accepts a DeepSpeed config as-is.

Keys trainmon does not own (``optimizer``, ``zero_optimization``, ``fp16``, ...) are kept in
:attr:`TrainmonConfig.raw` and ignored. Inside the sections trainmon owns, every key is
checked: an unknown key or a wrong type is a :class:`~trainmon.errors.ConfigError` that names
the full key path, the value, the expected type and the closest valid key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from trainmon import redact
from trainmon.errors import ConfigError, did_you_mean

DEFAULT_JOB_NAME = "DeepSpeedJobName"


def _doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field carrying its one-line documentation (used for the README table)."""
    return field(metadata={"doc": text}, **kwargs)


@dataclass(frozen=True)
class OutputSection:
    """Shape shared by DeepSpeed's ``tensorboard`` / ``csv_monitor`` and trainmon's ``jsonl``."""

    enabled: bool = _doc("Turn this writer on.", default=False)
    output_path: str = _doc(
        'Base folder; "" means the current directory (DeepSpeed\'s default).', default=""
    )
    job_name: str = _doc(
        "Sub-folder of output_path for this run (DeepSpeed's default).", default=DEFAULT_JOB_NAME
    )
    every: Literal["step", "window"] = _doc(
        "Write every step's values, or one value per window (the window mean at its last step).",
        default="step",
    )

    def job_dir(self) -> Path:
        """``<output_path>/<job_name>``, as DeepSpeed lays it out (shared by every rank)."""
        return Path(self.output_path or ".") / self.job_name


@dataclass(frozen=True)
class TensorBoardConfig(OutputSection):
    """TensorBoard event files in ``<output_path>/<job_name>/``."""


@dataclass(frozen=True)
class CsvMonitorConfig(OutputSection):
    """One CSV per metric in ``<output_path>/<job_name>/``, DeepSpeed's ``csv_monitor`` layout."""


@dataclass(frozen=True)
class JsonlConfig(OutputSection):
    """Append-only journal ``<output_path>/<job_name>/metrics.jsonl`` (trainmon's own section)."""


@dataclass(frozen=True)
class ConsoleConfig:
    """One readable line every ``steps_per_print`` steps, on the writing rank."""

    enabled: bool = _doc("Print progress lines.", default=True)
    stream: Literal["stdout", "stderr"] = _doc("Where the lines go.", default="stdout")
    live: Literal["auto", "on", "off"] = _doc(
        'One live progress line, rewritten in place between window lines: "auto" when the '
        "stream is an interactive terminal (never for files, pipes or log collectors).",
        default="auto",
    )


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases run settings (DeepSpeed's keys)."""

    enabled: bool = _doc("Turn the W&B writer on.", default=False)
    project: str = _doc("W&B project.", default="deepspeed")
    group: str | None = _doc("W&B group (per-rank runs share it).", default=None)
    team: str | None = _doc("W&B team (DeepSpeed's name for entity).", default=None)
    entity: str | None = _doc("W&B entity; an alias of team.", default=None)
    name: str | None = _doc("Run name.", default=None)
    tags: list[str] = _doc("Run tags.", default_factory=list)
    mode: Literal["online", "offline", "disabled"] | None = _doc(
        "null: WANDB_MODE, else online with an API key, else offline with a warning.",
        default=None,
    )
    dir: str | None = _doc("Folder for W&B's local files.", default=None)
    id: str | None = _doc("Run id, to resume a run.", default=None)
    resume: Literal["allow", "must", "never", "auto"] | None = _doc(
        "W&B resume policy.", default=None
    )
    config: dict[str, Any] = _doc("Hyper-parameters recorded with the run.", default_factory=dict)

    def __post_init__(self) -> None:
        if self.team and self.entity and self.team != self.entity:
            raise ConfigError(
                f"'wandb.team' = {self.team!r} and 'wandb.entity' = {self.entity!r} disagree: "
                "they are two names for the W&B entity; set only one of them"
            )


@dataclass(frozen=True)
class CometConfig:
    """Comet experiment settings (DeepSpeed's keys)."""

    enabled: bool = _doc("Turn the Comet writer on.", default=False)
    samples_log_interval: int = _doc("Log every N samples.", default=100)
    project: str | None = _doc("Comet project.", default=None)
    workspace: str | None = _doc("Comet workspace.", default=None)
    api_key: str | None = _doc("Comet API key.", default=None)
    experiment_name: str | None = _doc("Experiment name.", default=None)
    experiment_key: str | None = _doc("Experiment key.", default=None)
    online: bool | None = _doc("Online or offline experiment.", default=None)
    mode: str | None = _doc("Comet start mode.", default=None)

    def __post_init__(self) -> None:
        if self.samples_log_interval < 0:
            raise ConfigError(
                f"'comet.samples_log_interval' = {self.samples_log_interval!r}: expected an "
                f"integer >= 0"
            )


_PROMETHEUS_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class PrometheusConfig:
    """Latest metric values for Prometheus: an exporter it scrapes, and/or a Pushgateway.

    Trainmon's own section (key ``prometheus``); see :mod:`trainmon.writers.prometheus`.
    """

    enabled: bool = _doc("Turn the Prometheus writer on.", default=False)
    serve: bool = _doc(
        "Serve the latest value of every metric at http://host:port/metrics for Prometheus "
        "to scrape.",
        default=True,
    )
    host: str = _doc(
        'Address the exporter listens on: loopback unless you name another ("0.0.0.0": all).',
        default="127.0.0.1",
    )
    port: int = _doc(
        "Exporter port; with trainmon.per_rank_output each rank serves on port + LOCAL_RANK; "
        "0 lets the system pick a free one.",
        default=9400,
    )
    namespace: str = _doc(
        "Prefix of every metric name: train/loss is served as trainmon_train_loss.",
        default="trainmon",
    )
    job: str | None = _doc(
        "The job label and Pushgateway grouping key; null means the run's name (see Run identity).",
        default=None,
    )
    pushgateway_url: str | None = _doc(
        "Also push to this Pushgateway (e.g. http://pushgateway:9091), grouped by job and rank; "
        "null means no push.",
        default=None,
    )
    push_interval_s: float = _doc(
        "Push new values at most this often, and once more at close; 0 pushes at every flush.",
        default=15.0,
    )
    delete_on_close: bool = _doc(
        "Delete this job and rank's group from the Pushgateway at close (after the last push).",
        default=False,
    )
    timeout_s: float = _doc(
        "Longest wait for one Pushgateway request; a failed push is counted, and its values "
        "go with the next one.",
        default=2.0,
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"'prometheus.port' = {self.port!r}: expected a port from 0 to 65535")
        if self.namespace and not _PROMETHEUS_NAME.fullmatch(self.namespace):
            raise ConfigError(
                f"'prometheus.namespace' = {self.namespace!r}: expected letters, digits and _ "
                f'not starting with a digit (a Prometheus metric name prefix), or ""'
            )
        if not self.host.strip():
            raise ConfigError(
                "'prometheus.host' = '': expected an address to listen on, e.g. '127.0.0.1'"
            )
        if self.job is not None and not self.job:
            raise ConfigError("'prometheus.job' = '': expected a non-empty job name, or null")
        if self.pushgateway_url is not None and not self.pushgateway_url.strip():
            raise ConfigError(
                "'prometheus.pushgateway_url' = '': expected a URL such as "
                "'http://pushgateway:9091', or null for no push"
            )
        for name in ("push_interval_s", "timeout_s"):
            value = getattr(self, name)
            smallest = 0.0 if name == "push_interval_s" else 1e-3
            if not smallest <= value < float("inf"):
                raise ConfigError(
                    f"'prometheus.{name}' = {value!r}: expected a finite number of seconds "
                    f"{'>= 0' if smallest == 0 else '> 0'}"
                )


@dataclass(frozen=True)
class MlflowConfig:
    """MLflow tracking: one run per writing rank (trainmon's own section, key ``mlflow``)."""

    enabled: bool = _doc("Turn the MLflow writer on.", default=False)
    tracking_uri: str | None = _doc(
        "Where runs go: a server URL, sqlite:///path.db, ...; null means MLFLOW_TRACKING_URI, "
        "else MLflow's default.",
        default=None,
    )
    experiment: str | None = _doc(
        "Experiment name, created when missing; null means MLFLOW_EXPERIMENT_NAME, else "
        "MLflow's Default experiment.",
        default=None,
    )
    run_name: str | None = _doc(
        "Run name; null means the run's name (see Run identity).", default=None
    )
    run_id: str | None = _doc(
        "Log into this existing run (to resume it) instead of starting a new one.", default=None
    )
    tags: dict[str, Any] = _doc(
        "Tags set on the run (values stored as text).", default_factory=dict
    )
    params: dict[str, Any] = _doc(
        "Parameters recorded with the run (values stored as text).", default_factory=dict
    )

    def __post_init__(self) -> None:
        for name in ("tracking_uri", "experiment", "run_name", "run_id"):
            if getattr(self, name) == "":
                raise ConfigError(f"'mlflow.{name}' = '': expected a non-empty string, or null")


@dataclass(frozen=True)
class PipelineConfig:
    """How the background pipeline queues and flushes (key ``trainmon``)."""

    queue_size: int = _doc("Most events waiting for the background thread.", default=200_000)
    when_full: Literal["wait", "drop"] = _doc(
        'Queue full: "wait" up to full_wait_s then drop with a warning, or "drop" at once; '
        "drops are counted in trainmon/dropped_events.",
        default="wait",
    )
    full_wait_s: float = _doc("Longest wait for queue space before dropping.", default=1.0)
    flush_interval_s: float = _doc(
        "Writers push to disk at least this often; a kill -9 loses at most this much.",
        default=1.0,
    )
    window_steps: int | None = _doc(
        "Steps per aggregation window; null means steps_per_print.", default=None
    )
    window_seconds: float | None = _doc(
        "Close a window after this many seconds instead of a number of steps "
        "(windows then differ between ranks, so cross-rank statistics are off).",
        default=None,
    )
    per_rank_output: bool = _doc(
        "Every rank writes, each into <output_path>/<job_name>/rank-<r>/.", default=False
    )
    log_rank: int | Literal["last"] = _doc(
        'The rank that writes (without per_rank_output) and evaluates alerts; "last" is '
        "world_size - 1, where the loss lives under pipeline parallelism.",
        default=0,
    )
    cross_rank: Literal["auto", "on", "off"] = _doc(
        'Gather per-rank window statistics on the logging rank (one collective per window); "auto" '
        "turns it on under trainmon.initialize, where every rank logs every step.",
        default="auto",
    )
    collective_timeout_s: float = _doc(
        "Longest wait for other ranks in a monitoring collective before giving up on it.",
        default=60.0,
    )
    close_timeout_s: float = _doc(
        "Longest close() (and so process exit) waits for writers and alert sinks to finish; "
        "what they did not deliver by then is listed in one warning.",
        default=5.0,
    )
    layer_stats: bool = _doc(
        "trainmon.initialize: log layers/<group>/grad_norm, weight_norm and update_ratio at each "
        "window end (any loop: Monitor.watch_layers), and name the groups that moved most in "
        "spike, growth and non_finite alerts.",
        default=False,
    )
    layer_stats_depth: int | None = _doc(
        "Name components per layer group (blocks.11.attn is 3); null means top-level blocks "
        "(blocks.11, fc1).",
        default=None,
    )
    total_steps: int | None = _doc(
        "Steps the run will take, for the console's progress and ETA (step 500/2000 (25%) · "
        "elapsed · ETA); null means scheduler.params.total_num_steps, or "
        "Monitor.set_total_steps(), else no ETA.",
        default=None,
    )


@dataclass(frozen=True)
class CommsLoggerConfig:
    """DeepSpeed's ``comms_logger``: per-collective counts, sizes, latency and bandwidth."""

    enabled: bool = _doc("Record collectives (false really means off).", default=False)
    verbose: bool = _doc("Log every collective as it completes.", default=False)
    prof_all: bool = _doc("Record every collective (else only prof_ops).", default=True)
    prof_ops: list[str] = _doc(
        'Collectives to record when prof_all is false, e.g. ["all_reduce"].', default_factory=list
    )
    debug: bool = _doc("Include the caller's function name in verbose lines.", default=False)


@dataclass(frozen=True)
class ThroughputConfig:
    """What a sample is worth, so samples/s can become tokens/s, TFLOPS and MFU."""

    tokens_per_sample: int | None = _doc("Tokens in one sample (sequence length).", default=None)
    flops_per_sample: float | None = _doc(
        "FLOPs of forward+backward for one sample (e.g. 6 x parameters x tokens).", default=None
    )
    peak_tflops: float | None = _doc(
        "Peak TFLOPS of one device for MFU; null looks the accelerator up in a known table.",
        default=None,
    )

    def __post_init__(self) -> None:
        # a zero, negative or NaN peak would divide by zero (or lie) inside engine.step()
        if self.tokens_per_sample is not None and self.tokens_per_sample < 1:
            raise ConfigError(
                f"'throughput.tokens_per_sample' = {self.tokens_per_sample!r}: expected an "
                f"integer >= 1, or null"
            )
        for name in ("flops_per_sample", "peak_tflops"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise ConfigError(
                    f"'throughput.{name}' = {value!r}: expected a finite number > 0, or null"
                )


# ---- alerts -----------------------------------------------------------------------------------

ALERT_KINDS = ("threshold", "non_finite", "spike", "drop", "growth", "stall")
ALERT_OPS = (">", ">=", "<", "<=", "==", "!=")
AlertKind = Literal["threshold", "non_finite", "spike", "drop", "growth", "stall"]


@dataclass(frozen=True)
class AlertRuleConfig:
    """One alert rule, checked: what it watches, when it fires, and what firing does.

    Built from one entry of ``alerts.rules`` by :func:`parse_alert_rules`; the meaning of each
    kind is documented in :mod:`trainmon.alerts.rules`.
    """

    name: str = _doc("Unique name of the rule; also the metric alerts/<name>.", default="")
    kind: AlertKind = _doc(
        "threshold, non_finite, spike, drop, growth or stall; threshold when op is given.",
        default="threshold",
    )
    metric: str | None = _doc(
        "The metric watched, e.g. train/loss (every kind but stall).", default=None
    )
    op: Literal[">", ">=", "<", "<=", "==", "!="] | None = _doc(
        "threshold: how the value is compared with threshold.", default=None
    )
    threshold: float | None = _doc("threshold: the value compared against.", default=None)
    for_steps: int = _doc(
        "threshold, non_finite, spike, drop: consecutive steps the condition must hold.", default=1
    )
    factor: float | None = _doc(
        "spike: fire when value > factor x baseline (factor > 1).", default=None
    )
    percent: float | None = _doc(
        "drop: fire when value < baseline x (1 - percent / 100).", default=None
    )
    window: int = _doc("spike, drop: how many recent values make the baseline.", default=100)
    baseline: Literal["median", "mean"] = _doc(
        "spike, drop: the baseline is the median (default) or the mean of the window.",
        default="median",
    )
    min_samples: int | None = _doc(
        "spike, drop: values needed before the rule can fire; null means min(10, window).",
        default=None,
    )
    windows: int = _doc(
        "growth: fire when the window mean rose in each of this many consecutive windows.",
        default=5,
    )
    seconds: float | None = _doc("stall: fire when no step completed for this long.", default=None)
    multiple: float | None = _doc(
        "stall: fire when no step completed for multiple x the recent median step interval.",
        default=None,
    )
    severity: Literal["info", "warning", "critical"] = _doc(
        "How urgent the alert is; when not given, critical for a non_finite rule on a loss "
        "(see default_severity), else warning.",
        default="warning",
    )
    action: Literal["alert", "stop"] = _doc(
        'Only alert, or also ask training to stop ("stop": TrainingStopped at the next step).',
        default="alert",
    )
    cooldown_s: float = _doc(
        "While the condition lasts, send the alert again after this many seconds.", default=300.0
    )
    labels: dict[str, str] = _doc("Extra labels copied into every alert.", default_factory=dict)


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


_RULE_COMMON = ("name", "kind", "severity", "action", "cooldown_s", "labels")
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


def parse_alert_rules(rules: list[Any] | tuple[Any, ...]) -> tuple[AlertRuleConfig, ...]:
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
    if kind == "stall" and entry.get("seconds") is None and entry.get("multiple") is None:
        raise ConfigError(
            f"{where}: a stall rule needs '{path}.seconds' (no step for that long) or "
            f"'{path}.multiple' (no step for that many median step intervals), or both"
        )
    kwargs: dict[str, Any] = {"kind": kind}
    for key, value in entry.items():
        if key == "kind":
            continue
        expected = _without_null(_field_type(AlertRuleConfig, key))
        kwargs[key] = _convert(value, expected, f"{path}.{key}", where)
    if "severity" not in kwargs:
        kwargs["severity"] = default_severity(kind, kwargs.get("metric"))
    _check_rule_ranges(kwargs, path, where)
    return AlertRuleConfig(**kwargs)


def _without_null(tp: Any) -> Any:
    """``float | None`` → ``float``: a key given in a rule must have a value."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return options[0]
    return tp


def _check_rule_ranges(kwargs: Mapping[str, Any], path: str, where: str) -> None:
    def bad(key: str, expected: str) -> ConfigError:
        return ConfigError(f"{where}: '{path}.{key}' = {kwargs[key]!r}: expected {expected}")

    inf = float("inf")
    if not kwargs["name"].strip():
        raise bad("name", "a non-empty name")
    if "metric" in kwargs and not kwargs["metric"]:
        raise bad("metric", "a metric name such as 'train/loss'")
    for key in ("for_steps", "windows"):
        if key in kwargs and kwargs[key] < 1:
            raise bad(key, "an integer >= 1")
    if "window" in kwargs and kwargs["window"] < 2:
        raise bad("window", "an integer >= 2")
    if "min_samples" in kwargs and not 1 <= kwargs["min_samples"] <= kwargs.get("window", 100):
        raise bad("min_samples", "an integer from 1 to window")
    if "threshold" in kwargs and kwargs["threshold"] != kwargs["threshold"]:
        raise bad("threshold", "a number (not NaN)")
    if "factor" in kwargs and not 1 < kwargs["factor"] < inf:
        raise bad("factor", "a finite number > 1")
    if "percent" in kwargs and not 0 < kwargs["percent"] < 100:
        raise bad("percent", "a number between 0 and 100")
    if "seconds" in kwargs and not 0 < kwargs["seconds"] < inf:
        raise bad("seconds", "a finite number of seconds > 0")
    if "multiple" in kwargs and not 1 < kwargs["multiple"] < inf:
        raise bad("multiple", "a finite number > 1")
    if "cooldown_s" in kwargs and not 0 <= kwargs["cooldown_s"] < inf:
        raise bad("cooldown_s", "a finite number of seconds >= 0")
    labels = kwargs.get("labels", {})
    for label, text in labels.items():
        if not isinstance(label, str) or not isinstance(text, str):
            raise ConfigError(
                f"{where}: '{path}.labels' has {label!r}: {text!r}; expected string keys and "
                f"string values"
            )


@dataclass(frozen=True)
class AlertsConfig:
    """Alert rules and the sinks that deliver alerts (trainmon's own section, key ``alerts``).

    Rules are checked when the config is loaded: a bad one is a :class:`ConfigError` naming it.
    """

    rules: list[dict[str, Any]] = _doc(
        "Alert rules, each a mapping with name, kind (threshold, non_finite, spike, drop, "
        "growth, stall), metric and the kind's keys; see trainmon.alerts.rules.",
        default_factory=list,
    )
    sinks: list[dict[str, Any]] = _doc(
        'Where alerts go, each a mapping with a "type" (console, file, webhook, ...).',
        default_factory=lambda: [{"type": "console"}],
    )

    def __post_init__(self) -> None:
        parse_alert_rules(self.rules)
        check_sinks(self.sinks, has_run_dir=True)

    def rule_configs(self) -> tuple[AlertRuleConfig, ...]:
        """The rules, checked and typed."""
        return parse_alert_rules(self.rules)


@dataclass(frozen=True)
class TrainmonConfig:
    """The monitoring part of a DeepSpeed-style config, validated; ``raw`` keeps the whole dict."""

    steps_per_print: int = _doc("Console line every N steps (DeepSpeed's default).", default=10)
    wall_clock_breakdown: bool = _doc(
        "Report forward/backward/optimizer/communication/data time per step.", default=False
    )
    train_batch_size: int | None = _doc(
        "Samples per optimizer step across all ranks (DeepSpeed's rule).", default=None
    )
    train_micro_batch_size_per_gpu: int | None = _doc(
        "Samples per forward on one rank.", default=None
    )
    gradient_accumulation_steps: int | None = _doc(
        "Micro-batches per optimizer step.", default=None
    )
    gradient_clipping: float = _doc(
        "Clip the global gradient norm to this; 0 means no clipping.", default=0.0
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
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    writers: list[dict[str, Any]] | None = _doc(
        'Writers of your own, each {"class": "package.module:Name", ...keyword arguments of '
        "its constructor} or a name given to trainmon.writers.register_writer.",
        default=None,
    )
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


ConfigSource = TrainmonConfig | Mapping[str, Any] | str | os.PathLike[str] | None

_SECTIONS: dict[str, type] = {
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(TrainmonConfig)
    if f.default_factory is not dataclasses.MISSING and f.name != "raw"
}
_TOP_LEVEL = [f.name for f in dataclasses.fields(TrainmonConfig) if f.name not in _SECTIONS]


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
    kwargs: dict[str, Any] = {}
    for key in _TOP_LEVEL:
        if key in data:
            kwargs[key] = _convert(data[key], _field_type(TrainmonConfig, key), key, origin)
    for key, section_type in _SECTIONS.items():
        if key in data:
            kwargs[key] = _build_section(section_type, data[key], key, origin)
    for key in (
        "steps_per_print",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
    ):
        if kwargs.get(key) is not None and kwargs[key] < 1:
            raise ConfigError(f"{origin}: {key!r} = {data[key]!r}: expected an integer >= 1")
    if not 0 <= kwargs.get("gradient_clipping", 0.0) < float("inf"):
        raise ConfigError(
            f"{origin}: 'gradient_clipping' = {data['gradient_clipping']!r}: expected a finite "
            f"number >= 0 (0 turns clipping off)"
        )
    config = TrainmonConfig(raw=dict(data), **kwargs)
    _check_semantics(config, origin)
    return config


def _build_section(section_type: type, value: Any, path: str, origin: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{origin}: {path!r} = {value!r}: expected a mapping of settings "
            f"(keys: {', '.join(_field_names(section_type))})"
        )
    names = _field_names(section_type)
    kwargs = {}
    for key, item in value.items():
        full = f"{path}.{key}"
        if key not in names:
            suggestion = did_you_mean(str(key), names, cutoff=0.5, end=" ")
            raise ConfigError(
                f"{origin}: unknown key {full!r}; {suggestion}valid keys of {path!r}: "
                f"{', '.join(names)}"
            )
        kwargs[key] = _convert(item, _field_type(section_type, key), full, origin)
    return section_type(**kwargs)


def _check_semantics(config: TrainmonConfig, origin: str) -> None:
    has_run_dir = False
    for key in ("tensorboard", "csv_monitor", "jsonl"):
        section: OutputSection = getattr(config, key)
        _check_path_part(section.output_path, f"{key}.output_path", origin, relative=False)
        _check_path_part(section.job_name, f"{key}.job_name", origin, relative=True)
        has_run_dir = has_run_dir or section.enabled
    # a file sink without a path needs a run folder: known only once the outputs are known
    check_sinks(config.alerts.sinks, has_run_dir=has_run_dir)
    pipeline = config.trainmon
    for name in ("queue_size", "window_steps", "total_steps", "layer_stats_depth"):
        value = getattr(pipeline, name)
        if value is not None and value < 1:
            raise ConfigError(f"{origin}: 'trainmon.{name}' = {value!r}: expected an integer >= 1")
    if pipeline.log_rank != "last" and pipeline.log_rank < 0:
        raise ConfigError(
            f"{origin}: 'trainmon.log_rank' = {pipeline.log_rank!r}: expected an integer >= 0, "
            'or "last"'
        )
    for name in (
        "full_wait_s",
        "flush_interval_s",
        "window_seconds",
        "collective_timeout_s",
        "close_timeout_s",
    ):
        value = getattr(pipeline, name)
        if value is not None and (not value >= 0 or value == float("inf")):
            raise ConfigError(
                f"{origin}: 'trainmon.{name}' = {value!r}: expected a finite number of seconds >= 0"
            )


def check_sinks(sinks: Any, *, has_run_dir: bool) -> None:
    """``alerts.sinks`` checked exactly as the Monitor builds them (no I/O, nothing sent)."""
    from trainmon.alerts.sinks import build_sinks

    build_sinks(sinks, run_dir=Path("run") if has_run_dir else None, job="job")


def _check_path_part(value: str, path: str, origin: str, *, relative: bool) -> None:
    """Refuse paths that could make a writer write outside the folder the user named."""
    if "\x00" in value:
        raise ConfigError(f"{origin}: {path!r} = {value!r} contains a NUL character")
    if not relative:
        return
    parts = PurePosixPath(value.replace("\\", "/")).parts
    if not value or value.startswith(("/", "\\")) or ".." in parts or ":" in value[:2]:
        raise ConfigError(
            f"{origin}: {path!r} = {value!r}: expected a non-empty relative folder name "
            f"without '..' (it is placed inside output_path)"
        )


def _field_names(section_type: type) -> list[str]:
    return [f.name for f in dataclasses.fields(section_type)]


def _field_type(owner: type, name: str) -> Any:
    return typing.get_type_hints(owner)[name]


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin is dict:
        return "a mapping"
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0]).split(' ', 1)[-1]}s"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(value: Any, tp: Any, path: str, origin: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are."""
    kind = typing.get_origin(tp)
    ok = False
    if kind is Literal:
        choices = typing.get_args(tp)
        if value in choices and isinstance(value, str):
            return value
        extra = did_you_mean(str(value), [str(c) for c in choices], start="; ")
        raise ConfigError(
            f"{origin}: {path!r} = {redact.shown(value)}: expected {_describe(tp)}{extra}"
        )
    if kind in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _convert(value, option, path, origin)
            except ConfigError:
                continue
    elif tp is type(None):
        ok = value is None
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an int beyond the range of a float
                ok = False
    elif tp is str:
        ok = isinstance(value, str)
    elif kind is dict and isinstance(value, Mapping):
        return dict(value)
    elif kind is list and isinstance(value, (list, tuple)):
        (item_type,) = typing.get_args(tp)
        return [_convert(v, item_type, f"{path}[{i}]", origin) for i, v in enumerate(value)]
    if ok:
        return value
    raise ConfigError(f"{origin}: {path!r} = {redact.shown(value)}: expected {_describe(tp)}")


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(key, type, default, doc) for every key trainmon reads; drives the README's table."""
    rows = []
    for f in dataclasses.fields(TrainmonConfig):
        if f.name == "raw":
            continue
        if f.name in _SECTIONS:
            section = _SECTIONS[f.name]
            for sf in dataclasses.fields(section):
                rows.append(
                    (
                        f"{f.name}.{sf.name}",
                        _describe(_field_type(section, sf.name)),
                        repr(_default_of(sf)),
                        sf.metadata.get("doc", ""),
                    )
                )
        else:
            rows.append(
                (
                    f.name,
                    _describe(_field_type(TrainmonConfig, f.name)),
                    repr(f.default),
                    f.metadata.get("doc", ""),
                )
            )
    return rows
