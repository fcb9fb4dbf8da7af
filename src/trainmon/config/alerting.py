"""Alert rules, alert sinks and the ``alerts`` section that holds them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from trainmon import redact
from trainmon.errors import ConfigError, did_you_mean
from trainmon.schema import (
    ENV_VAR,
    EXISTING_FILE,
    HTTP_URL,
    SettingError,
    Settings,
    build,
    construct,
    expected,
    fields_of,
    setting,
    without_null,
)

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
RULE_REQUIRED: dict[str, tuple[str, ...]] = {
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
    for key in RULE_REQUIRED[kind]:
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
