"""Typed settings: each field carries its documentation and its constraints, and one checker
turns a mapping into the dataclass and refuses what the field metadata does not allow.

:func:`setting` declares a field (one-line doc, default, range and form); a dataclass that
inherits :class:`Settings` checks and converts every such field when it is built, from a
config file or in code, and then runs its :meth:`Settings.check` for the rules that tie
several fields together. The same metadata writes the README's config reference table
(:func:`expected` is both its "type" column and the "expected ..." of every error).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal, TypeVar

from trainmon import redact
from trainmon.errors import ConfigError, did_you_mean

T = TypeVar("T")
_NO_VALUE: Any = object()


@dataclass(frozen=True)
class Form:
    """A shape a string must have beyond "non-empty": a URL, an environment variable, ..."""

    describe: str
    """What is expected, in words (the README's type column)."""
    problem: Callable[[str], str | None]
    """Why a value is refused (``"expected ..."`` or a sentence of its own), None when fine."""


@dataclass(frozen=True)
class Limits:
    """The constraints one field declares (see :func:`setting`)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    infinite: bool = False
    nonempty: bool = False
    form: Form | None = None
    unit: str | None = None
    example: str | None = None


NO_LIMITS = Limits()


def setting(
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    infinite: bool = False,
    nonempty: bool = False,
    form: Form | None = None,
    unit: str | None = None,
    example: str | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field with its one-line documentation and what values it accepts.

    ``ge``/``gt``/``le``/``lt``: bounds of a number (>=, >, <=, <); a float is finite unless
    ``infinite``, and never NaN. ``nonempty``: a string with more than blanks, or a list with
    an item. ``form``: a :class:`Form` the string must have. ``unit`` ("seconds") and
    ``example`` only make the description read better. Choices come from ``Literal[...]``.
    Fields without a default are required. Other keyword arguments go to ``dataclasses.field``.
    """
    limits = Limits(ge, gt, le, lt, infinite, nonempty, form, unit, example)
    return dataclasses.field(metadata={"doc": doc, "limits": limits}, **kwargs)


class SettingError(ConfigError):
    """A refused field: ``'<path>.<key>' = <value>: <what was expected>``.

    Raised while a :class:`Settings` object is built, it names the key under the class's
    ``KEY`` path; :func:`construct` renders it again under the path it was built at
    (``alerts.sinks[2]``). In ``text``, ``$path`` stands for that path.
    """

    def __init__(self, key: str | None, text: str, value: Any = _NO_VALUE, path: str = ""):
        self.key, self.text, self.value = key, text, value
        super().__init__(self.render(path))

    def render(self, path: str) -> str:
        """The message with the key under ``path``."""
        text = self.text.replace("$path", path)
        if self.key is None:
            return text
        full = f"{path}.{self.key}" if path else self.key
        if self.value is _NO_VALUE:
            return f"'{full}' {text}"
        return f"'{full}' = {redact.shown(self.value)}: {text}"


class Settings:
    """Base of the typed settings: building one checks and converts its :func:`setting` fields.

    ``KEY`` is where the settings live in a config (``prometheus``, ``alerts.rules[]``); errors
    name keys under it. :meth:`check` holds the rules that tie fields together.
    """

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        try:
            for name, tp, limits in fields_of(type(self)):
                value = getattr(self, name)
                checked = convert(value, tp, limits, name)
                if checked is not value:
                    object.__setattr__(self, name, checked)
            self.check()
        except SettingError as exc:  # named under this class's place in a config
            raise SettingError(exc.key, exc.text, exc.value, path=self.KEY) from None

    def check(self) -> None:
        """Rules across fields; raise :class:`SettingError`. Nothing by default."""


def fields_of(cls: type) -> tuple[tuple[str, Any, Limits], ...]:
    """(name, annotation, limits) of each :func:`setting` field of ``cls``."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _FIELDS[cls] = tuple(
            (f.name, hints[f.name], f.metadata["limits"])
            for f in dataclasses.fields(cls)
            if "limits" in f.metadata
        )
    return found


_FIELDS: dict[type, tuple[tuple[str, Any, Limits], ...]] = {}


def is_required(f: dataclasses.Field[Any]) -> bool:
    """Whether the field has no default (the config must give it)."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def default_of(f: dataclasses.Field[Any]) -> Any:
    """The field's default value (a fresh one for a default factory)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


# ---- building from a mapping -----------------------------------------------------------------


def build(
    cls: type[T],
    data: Mapping[str, Any],
    path: str,
    *,
    owner: str,
    prefix: str = "",
    extra_keys: Sequence[str] = (),
) -> T:
    """``cls`` built from the mapping found at ``path``: unknown keys (with the closest valid
    one), missing required keys and refused values are :class:`ConfigError` naming the key.

    ``owner`` says what the mapping is (``"'tensorboard'"``, ``"a webhook sink"``); ``prefix``
    starts every message (where the config came from); ``extra_keys`` are keys the caller
    already read (a sink's ``type``). A required key given as null counts as missing.
    """
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    names = [f.name for f in fields]
    for key in data:
        if key not in names:
            valid = [*extra_keys, *names]
            suggestion = did_you_mean(str(key), valid, cutoff=0.5, end=" ")
            raise ConfigError(
                f"{prefix}unknown key '{path}.{key}'; {suggestion}valid keys of {owner}: "
                f"{', '.join(valid)}"
            )
    for f in fields:
        if is_required(f) and data.get(f.name) is None:
            example = f.metadata["limits"].example if "limits" in f.metadata else None
            raise ConfigError(
                f"{prefix}'{path}.{f.name}' is missing: {owner} needs it"
                + (f", e.g. {example}" if example else "")
            )
    return construct(cls, data, path, prefix=prefix)


def construct(cls: type[T], kwargs: Mapping[str, Any], path: str, *, prefix: str = "") -> T:
    """``cls(**kwargs)``, its refusals named under ``path`` (and after ``prefix``)."""
    try:
        return cls(**kwargs)
    except SettingError as exc:
        raise ConfigError(prefix + exc.render(path)) from None


# ---- one value against its annotation and limits ----------------------------------------------


def convert(value: Any, tp: Any, limits: Limits, key: str) -> Any:
    """``value`` checked against the annotation ``tp`` and ``limits``, converted (an int where
    a float is expected becomes a float, a tuple where a list is a list); else
    :class:`SettingError` naming ``key``."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    options = typing.get_args(tp) if union else (tp,)
    for option in options:
        matched, result = _match(value, option, limits, key)
        if matched:
            problem = _problem(result, option, limits, tp)
            if problem is not None:
                raise SettingError(key, problem, value)
            return result
    text = f"expected {expected(tp, limits)}"
    choices = [
        str(c) for o in options if typing.get_origin(o) is Literal for c in typing.get_args(o)
    ]
    if choices and isinstance(value, str):
        text += did_you_mean(value, choices, start="; ")
    raise SettingError(key, text, value)


def _match(value: Any, tp: Any, limits: Limits, key: str) -> tuple[bool, Any]:
    """(whether ``value`` has the type ``tp``, the converted value)."""
    kind = typing.get_origin(tp)
    if tp is Any:
        return True, value
    if kind is Literal:
        return isinstance(value, str) and value in typing.get_args(tp), value
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        try:
            return True, float(value)
        except OverflowError:  # an int beyond the range of a float
            return False, value
    if tp is str:
        return isinstance(value, str), value
    if kind is dict:
        if not isinstance(value, Mapping):
            return False, value
        args = typing.get_args(tp)
        if args and args[1] is str:
            ok = all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
            return ok, dict(value)
        return True, dict(value)
    if kind is list:
        if not isinstance(value, (list, tuple)):
            return False, value
        (item,) = typing.get_args(tp)
        inner = Limits(nonempty=limits.nonempty)
        return True, [convert(v, item, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(tp, type):
        return isinstance(value, tp), value
    return False, value


def _problem(value: Any, tp: Any, limits: Limits, whole: Any) -> str | None:
    """Why a value of the right type is refused by ``limits``, or None (the value is not
    null, so what is expected leaves null out)."""
    text = f"expected {expected(without_null(whole), limits)}"
    if limits.example:
        text += f", e.g. {limits.example}"
    if tp in (int, float):
        if value != value:
            return text + (" (not NaN)" if limits.infinite else "")
        if tp is float and not limits.infinite and math.isinf(value):
            return text
        low_ok = (limits.ge is None or value >= limits.ge) and (
            limits.gt is None or value > limits.gt
        )
        high_ok = (limits.le is None or value <= limits.le) and (
            limits.lt is None or value < limits.lt
        )
        return None if low_ok and high_ok else text
    if tp is str:
        if limits.nonempty and not value.strip():
            return text
        if limits.form is not None:
            problem = limits.form.problem(value)
            if problem is not None and problem.startswith("expected ") and limits.example:
                problem += f", e.g. {limits.example}"
            return problem
    if typing.get_origin(tp) is list and limits.nonempty and not value:
        return text
    return None


def expected(tp: Any, limits: Limits = NO_LIMITS) -> str:
    """What a field accepts, in words: ``an integer >= 1 or null``, ``one of 'wait', 'drop'``."""
    kind = typing.get_origin(tp)
    if kind is Literal:
        args = typing.get_args(tp)
        return repr(args[0]) if len(args) == 1 else "one of " + ", ".join(map(repr, args))
    if kind in (typing.Union, types.UnionType):
        return " or ".join(expected(a, limits) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if kind is dict:
        args = typing.get_args(tp)
        return "a mapping of strings to strings" if args and args[1] is str else "a mapping"
    if kind is list:
        item = expected(typing.get_args(tp)[0]).split(" ", 1)[-1]
        return f"a {'non-empty ' if limits.nonempty else ''}list of {item}s"
    if tp in (int, float):
        bounded = (limits.ge, limits.gt) != (None, None) and (limits.le, limits.lt) != (None, None)
        if tp is int:
            noun = "an integer"
        else:
            noun = "a number" if bounded or limits.infinite else "a finite number"
        unit = f" of {limits.unit}" if limits.unit else ""
        bounds = _bounds(limits)
        return f"{noun}{unit}{' ' + bounds if bounds else ''}"
    if tp is str:
        if limits.form is not None:
            return limits.form.describe
        return "a non-empty string" if limits.nonempty else "a string"
    return {bool: "a boolean", Any: "any value"}.get(tp, getattr(tp, "__name__", str(tp)))


def _bounds(limits: Limits) -> str:
    def number(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    if limits.ge is not None and limits.le is not None:
        return f"from {number(limits.ge)} to {number(limits.le)}"
    if limits.gt is not None and limits.lt is not None:
        return f"between {number(limits.gt)} and {number(limits.lt)}"
    parts = []
    for sign, bound in ((">=", limits.ge), (">", limits.gt), ("<=", limits.le), ("<", limits.lt)):
        if bound is not None:
            parts.append(f"{sign} {number(bound)}")
    return " and ".join(parts)


def without_null(tp: Any) -> Any:
    """The annotation without its ``None`` option: ``float | None`` → ``float``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        options = tuple(a for a in typing.get_args(tp) if a is not type(None))
        return options[0] if len(options) == 1 else typing.Union[options]  # noqa: UP007
    return tp


# ---- forms ------------------------------------------------------------------------------------


def _http_url(value: str) -> str | None:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL"
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return "expected a URL whose port is an integer from 1 to 65535"
    return None


def _env_set(value: str) -> str | None:
    if not value.strip():
        return "expected the name of an environment variable"
    if value not in os.environ:
        return (
            f"the environment variable {value} is not set (credentials are read only from the "
            f"environment, never from the config)"
        )
    return None


def _existing_file(value: str) -> str | None:
    if not value.strip() or not Path(value).expanduser().is_file():
        return "expected the path of an existing file"
    return None


def _no_nul(value: str) -> str | None:
    return "expected a path without a NUL character" if "\x00" in value else None


def _inner_folder(value: str) -> str | None:
    parts = PurePosixPath(value.replace("\\", "/")).parts
    bad = not value or value.startswith(("/", "\\")) or ".." in parts or ":" in value[:2]
    if bad or "\x00" in value:
        return (
            "expected a non-empty relative folder name without '..' (it is placed inside "
            "output_path)"
        )
    return None


HTTP_URL = Form("an http:// or https:// URL", _http_url)
ENV_VAR = Form("the name of a set environment variable", _env_set)
EXISTING_FILE = Form("the path of an existing file", _existing_file)
PATH = Form("a path (no NUL character)", _no_nul)
INNER_FOLDER = Form("a relative folder name without '..'", _inner_folder)


def pattern_form(describe: str, matches: Callable[[str], object]) -> Form:
    """A form for strings that must match a pattern (``""`` always allowed)."""

    def problem(value: str) -> str | None:
        return None if value == "" or matches(value) else f"expected {describe}"

    return Form(describe, problem)
