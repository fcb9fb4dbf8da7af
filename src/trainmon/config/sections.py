"""The sections trainmon reads from a DeepSpeed-style config: one Settings class each."""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from trainmon.schema import (
    INNER_FOLDER,
    PATH,
    SettingError,
    Settings,
    pattern_form,
    setting,
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
        "Writers push to disk at least this often; a kill -9 loses at most this much (the "
        "JSONL journal: at most one drain_interval_s, as it writes at every drain).",
        default=1.0,
        ge=0,
        unit="seconds",
    )
    drain_interval_s: float | None = setting(
        "How often the background thread takes what the training thread queued (sooner when "
        "asked to flush or when the queue fills): longer means fewer wake-ups and less CPU "
        "beside training, shorter means console lines and alert rules sooner. null: 0.02 s "
        'when an alert rule has "action": "stop" (a NaN stops training within a few steps), '
        "else 1 s; at most flush_interval_s.",
        default=None,
        ge=0.001,
        le=60,
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
    grad_norm_every: int = setting(
        "Log train/grad_norm every N optimizer steps (steps that are multiples of N); 0 never. "
        "Where trainmon computes the norm only for this metric (trainmon.attach at ZeRO 0 in "
        "fp32 without gradient_clipping, trainmon.initialize without gradient_clipping, the "
        "Lightning callback), the other steps skip the computation; where the engine computes "
        "it anyway (clipping, ZeRO 1-3, fp16) only its logging is skipped. Alert rules and the "
        "non-finite check on train/grad_norm see the logged steps only.",
        default=1,
        ge=0,
    )
    live_goodput: bool = setting(
        "Log goodput while the job runs: trainmon/goodput (the attempt so far, from its "
        "process's start), trainmon/goodput_window (the last goodput_window_s seconds) and "
        "their badput parts (trainmon/badput/*, trainmon/badput_window/*), at each window's "
        "end, to every writer, the console line and alert rules.",
        default=False,
    )
    goodput_window_s: float = setting(
        "The live goodput's rolling window (0: the attempt-so-far view only).",
        default=3600.0,
        ge=0,
        unit="seconds",
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
