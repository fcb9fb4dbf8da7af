"""The one loader: parse and check a config in one pass, reporting every mistake."""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmon.config.alerting import (
    RULE_REQUIRED,
    SINK_SETTINGS,
    SINK_TYPES,
    AlertRuleConfig,
    AlertsConfig,
)
from trainmon.config.deepspeed import DEEPSPEED_KEYS, ENGINE_KEYS, check_engine_sections
from trainmon.config.model import SECTIONS, TOP_LEVEL_KEYS, ConfigSource, TrainmonConfig
from trainmon.errors import ConfigError, did_you_mean
from trainmon.schema import (
    build,
    construct,
    default_of,
    expected,
    is_required,
)


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


def _read_file(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = _decoded(path, path.read_bytes())
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


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _decoded(path: Path, data: bytes) -> str:
    """``data`` as UTF-8 text, or a :class:`ConfigError` naming the file, the first byte that is
    not UTF-8 and where it is: JSON and YAML configs are UTF-8, and a bare
    ``UnicodeDecodeError`` would name neither the file nor the fix."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        if data.startswith(_UTF16_BOMS):
            guess, source = "it starts with a UTF-16 byte-order mark (saved as 'Unicode')", "UTF-16"
        else:
            guess, source = "it looks saved in another encoding (Latin-1, Windows-1252)", "LATIN1"
        raise ConfigError(
            f"config file {str(path)!r} is not UTF-8: byte 0x{data[exc.start]:02x} at byte offset "
            f"{exc.start} (line {line}) cannot be decoded as UTF-8 ({exc.reason}); {guess}. A "
            f"config must be UTF-8 JSON or YAML: save it as UTF-8, e.g. "
            f"iconv -f {source} -t UTF-8 OLD > NEW"
        ) from None


def _from_mapping(data: Mapping[str, Any], origin: str) -> TrainmonConfig:
    """Every section checked, and every mistake reported in one error (a section stops at its
    first mistake; the others are still checked)."""
    kwargs: dict[str, Any] = {key: data[key] for key in TOP_LEVEL_KEYS if key in data}
    errors: list[ConfigError] = []
    for key, section_type in SECTIONS.items():
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
        section = SECTIONS.get(f.name)
        if section is None:
            rows += [_row("", f, hints)] if "doc" in f.metadata else []
            continue
        rows += _rows(section, f"{f.name}.")
        if section is AlertsConfig:
            for row in _rows(AlertRuleConfig, "alerts.rules[]."):
                name = row[0].rsplit(".", 1)[-1]
                kinds = [kind for kind, keys in RULE_REQUIRED.items() if name in keys]
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
