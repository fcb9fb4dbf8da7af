"""Every invalid config of the suite in one list, for the one-validation-path test.

Each entry is ``(id, config, words)``: ``words`` must appear in the error. Sink entries sit in
a config with a rule and a JSONL output, so the Monitor really builds them.
"""

from __future__ import annotations

import math
from typing import Any

_RULE = {"name": "loss-high", "metric": "train/loss", "op": ">", "threshold": 10}


def _with_sinks(*sinks: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonl": {"enabled": True, "output_path": "out"},
        "alerts": {"rules": [_RULE], "sinks": list(sinks)},
    }


def _no_outputs(*sinks: dict[str, Any]) -> dict[str, Any]:
    return {"alerts": {"rules": [_RULE], "sinks": list(sinks)}}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    # the five that `trainmon validate` called "config OK" while Monitor refused them
    ("webhook-scheme", _with_sinks({"type": "webhook", "url": "ftp://h/x"}), "http://"),
    ("webhook-port", _with_sinks({"type": "webhook", "url": "http://h:99999/x"}), "port"),
    (
        "webhook-format",
        _with_sinks({"type": "webhook", "url": "http://h", "format": "dingtalkk"}),
        "did you mean 'dingtalk'",
    ),
    (
        "webhook-timeout",
        _with_sinks({"type": "webhook", "url": "http://h", "timeout_s": -1}),
        "timeout_s",
    ),
    (
        "webhook-header",
        _with_sinks({"type": "webhook", "url": "http://h", "headers": {"X-Token": 5}}),
        "headers",
    ),
    # the rest of the sinks' mistakes
    ("sink-type", _with_sinks({"type": "webhok", "url": "http://x"}), "did you mean 'webhook'"),
    ("webhook-no-url", _with_sinks({"type": "webhook"}), "url' is missing"),
    ("webhook-bare-host", _with_sinks({"type": "webhook", "url": "hooks.slack.com/x"}), "URL"),
    ("sink-key", _with_sinks({"type": "webhook", "url": "http://h", "fromat": "x"}), "format"),
    (
        "secret-env-unset",
        _with_sinks({"type": "webhook", "url": "http://h", "secret_env": "TRAINMON_TEST_UNSET"}),
        "TRAINMON_TEST_UNSET",
    ),
    (
        "email-port",
        _with_sinks({"type": "email", "host": "h", "port": 70000, "sender": "a@b", "to": ["c"]}),
        "port",
    ),
    ("email-to", _with_sinks({"type": "email", "host": "h", "sender": "a@b", "to": "c"}), "to"),
    ("pushgateway-port", _with_sinks({"type": "pushgateway", "url": "http://h:99999"}), "port"),
    ("alertmanager-url", _with_sinks({"type": "alertmanager"}), "url' is missing"),
    ("file-no-folder", _no_outputs({"type": "file"}), "no run folder"),
    # rules
    ("rule-kind", {"alerts": {"rules": [{"name": "r", "kind": "spiek", "metric": "m"}]}}, "spike"),
    (
        "rule-factor",
        {"alerts": {"rules": [{"name": "r", "kind": "spike", "metric": "m", "factor": 1}]}},
        "factor",
    ),
    # sections
    ("section-typo", {"tensorboard": {"enabled": True, "output_pth": "x"}}, "output_path"),
    ("section-type", {"csv_monitor": {"enabled": "yes"}}, "a boolean"),
    ("steps-per-print", {"steps_per_print": 0}, "steps_per_print"),
    ("when-full", {"trainmon": {"when_full": "dorp"}}, "drop"),
    ("job-name", {"tensorboard": {"job_name": "../x"}}, "job_name"),
    ("prometheus-port", {"prometheus": {"port": 99999}}, "prometheus.port"),
    ("mlflow-empty", {"mlflow": {"tracking_uri": ""}}, "mlflow.tracking_uri"),
    ("comet-interval", {"comet": {"samples_log_interval": -1}}, "samples_log_interval"),
    ("wandb-entity", {"wandb": {"team": "a", "entity": "b"}}, "wandb.team"),
    # issue 11.4: values that broke engine.step() or turned a feature off silently
    ("peak-tflops-zero", {"throughput": {"peak_tflops": 0}}, "throughput.peak_tflops"),
    ("peak-tflops-negative", {"throughput": {"peak_tflops": -5}}, "throughput.peak_tflops"),
    ("peak-tflops-nan", {"throughput": {"peak_tflops": math.nan}}, "throughput.peak_tflops"),
    ("flops-nan", {"throughput": {"flops_per_sample": math.nan}}, "flops_per_sample"),
    ("tokens-zero", {"throughput": {"tokens_per_sample": 0}}, "tokens_per_sample"),
    ("clipping-nan", {"gradient_clipping": math.nan}, "gradient_clipping"),
    ("clipping-negative", {"gradient_clipping": -1.0}, "gradient_clipping"),
    ("clipping-inf", {"gradient_clipping": math.inf}, "gradient_clipping"),
    # issue 25: the gradient norm every N steps
    ("grad-norm-negative", {"trainmon": {"grad_norm_every": -1}}, "trainmon.grad_norm_every"),
    ("grad-norm-bool", {"trainmon": {"grad_norm_every": True}}, "trainmon.grad_norm_every"),
    ("grad-norm-float", {"trainmon": {"grad_norm_every": 2.5}}, "an integer >= 0"),
]

#: What only ``trainmon.initialize`` builds: refused by it, listed as a problem by validate.
INVALID_FOR_INITIALIZE: list[tuple[str, dict[str, Any], str]] = [
    ("optimizer-type", {"optimizer": {"type": "Adamm"}}, "did you mean 'Adam'"),
    ("optimizer-params", {"optimizer": {"type": "AdamW", "params": [1]}}, "optimizer.params"),
    ("scheduler-type", {"scheduler": {"type": "OneCycle"}}, "scheduler.type"),
    (
        "scheduler-key",
        {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 5}}},
        "did you mean 'warmup_num_steps'",
    ),
    (
        "scheduler-total",
        {"scheduler": {"type": "WarmupDecayLR", "params": {}}},
        "total_num_steps",
    ),
]
