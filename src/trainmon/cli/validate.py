"""``trainmon validate CONFIG``: check a config and say what it will monitor, where.

Validity is decided by :func:`trainmon.config.check_config`, the function ``Monitor`` and
``trainmon.initialize`` call, so a config refused there is refused here (a
:class:`~trainmon.errors.ConfigError`, exit 2). A top-level key close to a known one is a warning
(an error with ``--strict``). One that loads but would not work as written — a writer whose
package is missing, an output folder that cannot be written, an ``optimizer`` or ``scheduler``
that ``trainmon.initialize`` cannot build — is listed under "problems" (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainmon import redact, writers
from trainmon.config import ConfigCheck, TrainmonConfig, check_config, check_engine_sections
from trainmon.errors import ConfigError
from trainmon.extras import is_installed

_SECRET_WORDS = ("token", "secret", "password", "key", "auth", "credential")
#: Config section → (module its writer imports, the pip extra that installs it).
_SDKS = {
    "wandb": ("wandb", "wandb"),
    "prometheus": ("prometheus_client", "prometheus"),
    "mlflow": ("mlflow", "mlflow"),
    "comet": ("comet_ml", "comet"),
}


#: Sections with an ``enabled`` key that are not writers (described on lines of their own).
_NOT_WRITERS = ("comms_logger", "system_metrics", "profiler")


def _field_names_with_enabled(config: TrainmonConfig) -> list[str]:
    """Config sections that can be switched on (they have an ``enabled`` key)."""
    return [
        f.name
        for f in dataclasses.fields(config)
        if hasattr(getattr(config, f.name), "enabled") and f.name not in _NOT_WRITERS
    ]


def validate(args: argparse.Namespace) -> int:
    """Print the effective monitoring setup and every mistake in one run: 2 when ``Monitor``
    would refuse the config (each mistake listed with its key path), 1 when problems were
    found (a near-miss of a known top-level key among them), else 0."""
    source = Path(args.config)
    refused = refusals(source)
    if refused:
        count = f"{len(refused)} mistake{'s' if len(refused) > 1 else ''}"
        print(f"trainmon validate: {source}: refused, {count}:", file=sys.stderr)
        for problem in refused:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    checked = check_config(source)
    if getattr(args, "strict", False) and checked.warnings:
        raise ConfigError(f"{source}: " + "; ".join(checked.warnings) + " (--strict)")
    lines, problems = describe(checked.config, source, checked)
    # a near-miss of a known section is almost always a typo that silently disables it: an
    # error here (Monitor keeps it a warning, as DeepSpeed accepts unknown keys)
    problems = list(checked.warnings) + list(problems)
    print("\n".join(lines))
    if problems:
        print("\nproblems:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print("\nconfig OK")
    return 0


def refusals(source: Path) -> list[str]:
    """Every mistake for which ``Monitor`` refuses the config, each with its key path: the
    config check (all sections) and each custom ``writers`` entry, checked as ``Monitor``
    checks it before constructing it."""
    try:
        config = check_config(source).config
    except ConfigError as error:
        return list(error.problems)
    found: list[str] = []
    for index, spec in enumerate(config.writers or ()):
        try:
            factory, _ = writers.check_custom_writer(index, spec)
            if not inspect.isclass(factory):
                # a function may return anything: call it as Monitor does, and close what it
                # built (a class is checked for write, flush and close without building it)
                built = writers.build_custom_writer(index, spec)
                built.close()
        except ConfigError as error:
            found += error.problems
        except Exception as error:
            found.append(f"'writers[{index}]': building it failed: {type(error).__name__}: {error}")
    return found


def _where(path: Path) -> str:
    return str(path.resolve())


def _writable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written, or None when it can."""
    probe = folder.resolve()
    while not probe.exists():
        if probe.parent == probe:
            return f"{folder}: no existing parent folder"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, so {folder} cannot be created"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable (needed for {folder})"
    return None


def _listed(keys: Sequence[str]) -> str:
    return ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")


def describe(
    config: TrainmonConfig, source: Path, checked: ConfigCheck | None = None
) -> tuple[list[str], list[str]]:
    """The lines describing ``config`` and the problems found in it."""
    checked = checked or check_config(config)
    lines = [f"config       {_where(source)}"]
    problems: list[str] = []
    if checked.engine_keys:
        lines.append(
            f"initialize   {_listed(checked.engine_keys)}: built by trainmon.initialize "
            "(left to DeepSpeed under deepspeed.initialize)"
        )
        try:
            check_engine_sections(config.raw)
        except ConfigError as exc:
            problems.append(f"trainmon.initialize would refuse this config: {exc}")
    if checked.deepspeed_keys:
        lines.append(
            f"ignored      {len(checked.deepspeed_keys)} DeepSpeed key(s) trainmon does not "
            f"use: {_listed(checked.deepspeed_keys)}"
        )
    if checked.unknown_keys:
        lines.append(
            f"unknown      {len(checked.unknown_keys)} key(s) neither trainmon nor DeepSpeed "
            f"knows (ignored): {_listed(checked.unknown_keys)}"
        )
    pipeline = config.trainmon
    per_rank = pipeline.per_rank_output
    lines.append(
        "ranks        every rank writes, each into <folder>/rank-<r>/ (trainmon.per_rank_output)"
        if per_rank
        else "ranks        rank 0 writes; the other ranks write nothing (the default)"
    )
    lines.append("writers")
    rank_dir = "rank-<r>/" if per_rank else ""
    outputs = (
        ("tensorboard", config.tensorboard, "events.out.tfevents.*", "crc32c", "tensorboard"),
        ("csv_monitor", config.csv_monitor, "<metric>.csv", None, None),
        ("jsonl", config.jsonl, "metrics.jsonl", None, None),
    )
    enabled = 0
    for key, section, files, package, extra in outputs:
        if not section.enabled:
            continue
        enabled += 1
        folder = section.job_dir()
        lines.append(
            f"  {key:<12} {_where(folder)}/{rank_dir}{files}  "
            f"(every {'window: one mean per window' if section.every == 'window' else 'step'})"
        )
        if package is not None and not is_installed(package):
            problems.append(
                f"{key}: the '{package}' package is not installed: "
                f'pip install "trainmon[{extra}]"'
            )
        reason = _writable(folder)
        if reason is not None:
            problems.append(f"{key}: cannot write there: {reason}")
    if config.console.enabled:
        enabled += 1
        lines.append(
            f"  {'console':<12} {config.console.stream}, one line every {config.steps_per_print}"
            " steps"
        )
    detailed = {key for key, *_ in outputs} | {"console"}
    backends = getattr(writers, "BACKENDS", ())
    for backend in backends:
        switch: Any = getattr(config, backend.section, None)
        if backend.section in detailed or not getattr(switch, "enabled", False):
            continue
        enabled += 1
        try:
            where = redact.text(str(backend.where(config)))
        except Exception as exc:  # a description must never stop validation
            where = f"(cannot describe: {exc})"
        lines.append(f"  {backend.section:<12} {where}")
        needed = _SDKS.get(backend.section)
        if needed is not None and not is_installed(needed[0]):
            problems.append(
                f"{backend.section}: the '{needed[0]}' package is not installed: "
                f'pip install "trainmon[{needed[1]}]"'
            )
    known = {b.section for b in backends}
    for name in _field_names_with_enabled(config):
        if name not in known and getattr(config, name).enabled:
            problems.append(
                f"{name}.enabled is set, but this trainmon version has no {name} writer"
            )
    if not enabled:
        lines.append("  (none enabled: nothing is written)")
    if pipeline.window_seconds is not None:
        window = f"{pipeline.window_seconds:g} s of wall time (trainmon.window_seconds)"
    elif pipeline.window_steps is not None:
        window = f"{pipeline.window_steps} steps (trainmon.window_steps)"
    else:
        window = f"{config.steps_per_print} steps (steps_per_print)"
    lines.append(f"window       {window}")
    cross = {
        "auto": "auto: on under trainmon.initialize (every rank logs every step), else off",
        "on": "on: rank 0 gathers every rank's window statistics (one collective per window)",
        "off": "off",
    }[pipeline.cross_rank]
    lines.append(f"cross-rank   {cross}")
    lines.append(
        f"queue        {pipeline.queue_size:,} events; when full: "
        + (
            f"wait up to {pipeline.full_wait_s:g} s, then drop"
            if pipeline.when_full == "wait"
            else "drop at once"
        )
        + f"; flushed every {pipeline.flush_interval_s:g} s"
    )
    lines.append(
        f"breakdown    {'on' if config.wall_clock_breakdown else 'off'} (wall_clock_breakdown)"
    )
    if config.comms_logger.enabled:
        ops = (
            "every collective"
            if config.comms_logger.prof_all
            else (", ".join(config.comms_logger.prof_ops) or "no collective (prof_ops is empty)")
        )
        lines.append(f"comms        {ops}")
    lines += _diagnostics(config)
    lines += _alerts(config, problems)
    return lines, problems


def _diagnostics(config: TrainmonConfig) -> list[str]:
    """The system-metrics sampler and the profile-on-demand trigger, one line each."""
    system: Any = getattr(config, "system_metrics", None)
    profiler: Any = getattr(config, "profiler", None)
    lines = []
    if system is not None:
        every = f"sys/* every {system.interval_s:g} s (system_metrics)"
        lines.append(f"system       {every if system.enabled else 'off (system_metrics)'}")
    if profiler is not None:
        trigger = (
            f"kill -{profiler.signal.removeprefix('SIG')} <pid> or " if profiler.signal else ""
        )
        text = f"{profiler.steps} steps on {trigger}touch RUN/profile"
        lines.append(f"profiler     {text if profiler.enabled else 'off'}")
    return lines


def _alerts(config: TrainmonConfig, problems: list[str]) -> list[str]:
    section: Any = getattr(config, "alerts", None)
    checked = section is not None
    if section is None:
        raw = config.raw.get("alerts")
        if raw is None:
            return ["alerts       none (no alerts section)"]
        if not isinstance(raw, Mapping):
            problems.append(f"alerts: expected a mapping with 'rules' and 'sinks', got {raw!r}")
            return []
        rules: Sequence[Any] = raw.get("rules") or []
        sinks: Sequence[Any] = raw.get("sinks") or []
    else:
        typed = getattr(section, "rule_configs", None)
        rules = typed() if callable(typed) else getattr(section, "rules", [])
        sinks = getattr(section, "sinks", [])
    if not rules:
        return ["alerts       no rules"]
    lines = [
        f"alerts       {len(rules)} rule(s)"
        + ("" if checked else " (not checked: this trainmon version does not read 'alerts')")
    ]
    for rule in rules:
        fields = _as_mapping(rule)
        lines.append(f"  {fields.get('name', '?')!s:<20} {_rule_text(fields)}")
    if sinks:
        lines.append("  sent to: " + "; ".join(_sink_text(_as_mapping(s)) for s in sinks))
    return lines


def _as_mapping(item: Any) -> Mapping[str, Any]:
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.asdict(item)
    return item if isinstance(item, Mapping) else {"name": str(item)}


def _rule_text(rule: Mapping[str, Any]) -> str:
    """What a rule watches and when it fires, in words."""
    kind = rule.get("kind") or ("threshold" if "op" in rule else "?")
    metric = rule.get("metric") or "?"
    steps = rule.get("for_steps") or 1
    held = f" for {steps} steps" if isinstance(steps, int) and steps > 1 else ""
    if kind == "threshold":
        text = f"{metric} {rule.get('op', '?')} {rule.get('threshold', '?')}{held}"
    elif kind == "non_finite":
        text = f"{metric} is NaN or Inf{held}"
    elif kind == "spike":
        text = (
            f"{metric} > {rule.get('factor', '?')} x the {rule.get('baseline') or 'median'} of "
            f"the last {rule.get('window') or 100} values{held}"
        )
    elif kind == "drop":
        text = (
            f"{metric} < {rule.get('baseline') or 'median'} of the last "
            f"{rule.get('window') or 100} values - {rule.get('percent', '?')}%{held}"
        )
    elif kind == "growth":
        text = f"{metric}: window mean rose {rule.get('windows') or 5} windows in a row"
    elif kind == "stall":
        limits = []
        if rule.get("seconds") is not None:
            limits.append(f"{rule['seconds']} s")
        if rule.get("multiple") is not None:
            limits.append(f"{rule['multiple']} x the median step interval")
        text = "no step completed for " + " or ".join(limits or ["?"])
    else:
        text = f"{kind} on {metric}"
    extra = [str(rule[k]) for k in ("severity",) if rule.get(k)]
    if rule.get("action") == "stop":
        extra.append("stops training")
    return f"{kind:<10} {text}" + (f"  ({', '.join(extra)})" if extra else "")


def _sink_text(sink: Mapping[str, Any]) -> str:
    """A sink and its target, with no secret in it (URLs shown as scheme://host/...)."""
    kind = str(sink.get("type", "?"))
    details = []
    for key, value in sink.items():
        if key == "type" or any(word in key.lower() for word in _SECRET_WORDS):
            continue
        if isinstance(value, str) and "://" in value:
            details.append(redact.url(value))
        elif key in ("path", "file", "dir", "directory") and isinstance(value, str):
            details.append(_where(Path(value)))
    return kind + (f" {' '.join(details)}" if details else "")
