"""Writers of the user's own, named in the config's ``writers`` list or registered in code.

A ``class`` is ``module:Name`` (imported at start-up) or a name given to :func:`register_writer`;
what it names is called with the entry's other keys and must return a writer. Every mistake is a
:class:`~trainmon.errors.ConfigError` at start-up naming ``writers[i].<key>``, so a typo never
surfaces as a silent missing backend mid-run.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainmon.core.aggregate import WindowStats
from trainmon.core.events import Extra, StepScalars
from trainmon.core.writer import RunStatus, Writer
from trainmon.errors import ConfigError, did_you_mean

WriterFactory = Callable[..., Any]
"""A writer class, or any callable returning a writer, called with a spec's keyword arguments."""

_REQUIRED = ("write", "flush", "close")
_EXAMPLE = '{"class": "mypackage.module:MyWriter", "path": "out.db"}'
_registry: dict[str, WriterFactory] = {}
_registry_lock = threading.Lock()


def register_writer(name: str, factory: WriterFactory) -> None:
    """Make ``{"class": name, ...}`` in the config's ``writers`` list build ``factory(...)``.

    ``factory`` is a writer class or a callable returning a writer; registering a name again
    replaces the earlier factory. Names hold no ``:`` or ``.``, so they never look like an
    import path.
    """
    if not isinstance(name, str) or not name or ":" in name or "." in name:
        raise ValueError(
            f"register_writer: name {name!r}: expected a non-empty string without ':' or '.' "
            f"(those mark an import path such as 'package.module:Name')"
        )
    if not callable(factory):
        raise TypeError(f"register_writer({name!r}, ...): {factory!r} is not callable")
    with _registry_lock:
        _registry[name] = factory


def unregister_writer(name: str) -> None:
    """Forget a name given to :func:`register_writer` (nothing happens if it is unknown)."""
    with _registry_lock:
        _registry.pop(name, None)


def registered_writers() -> dict[str, WriterFactory]:
    """A copy of the registered names and their factories."""
    with _registry_lock:
        return dict(_registry)


class _DuckWriter(Writer):
    """Adapts an object with ``write``/``flush``/``close`` (not a Writer subclass) to the
    contract, so :class:`~trainmon.writers.WriterGroup` treats it like any other writer."""

    kind = "custom"

    def __init__(self, target: Any, class_path: str) -> None:
        self.target = target
        where = getattr(target, "location", "")
        self.location = f"{class_path} {where}" if where else class_path
        if getattr(target, "every", "step") == "window":
            self.every = "window"
        self._write_windows = getattr(target, "write_windows", None)
        self._write_extras = getattr(target, "write_extras", None)

    def write(self, records: Sequence[StepScalars]) -> None:
        self.target.write(records)

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        if self._write_windows is not None:
            self._write_windows(windows)

    def write_extras(self, records: Sequence[Extra]) -> None:
        if self._write_extras is not None:
            self._write_extras(records)

    def flush(self) -> None:
        self.target.flush()

    @property
    def dropped_events(self) -> int:
        return int(getattr(self.target, "dropped_events", 0))

    def finalize(self, status: RunStatus) -> None:
        """The object's own ``finalize(status)`` when it has one (see :meth:`Writer.finalize`)."""
        finalize = getattr(self.target, "finalize", None)
        if callable(finalize):
            finalize(status)

    def close(self) -> None:
        self.target.close()

    def identity(self) -> Mapping[str, Any] | None:
        """The object's own ``identity()`` when it has one (see :meth:`Writer.identity`)."""
        identity = getattr(self.target, "identity", None)
        return identity() if callable(identity) else None

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:
        """The object's own ``resume(step, identity)`` when it has one."""
        resume = getattr(self.target, "resume", None)
        if callable(resume):
            resume(step, identity)

    def __repr__(self) -> str:
        return f"<{type(self.target).__name__} {self.location}>"


def check_custom_writer(
    index: int, spec: Mapping[str, Any]
) -> tuple[WriterFactory, dict[str, Any]]:
    """Everything :func:`build_custom_writer` checks before it constructs ``writers[index]``
    (what ``trainmon validate`` checks too): the factory it names and its keyword arguments."""
    path = f"writers[{index}]"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{path!r} = {spec!r}: expected a mapping such as {_EXAMPLE}")
    target = spec.get("class")
    if not isinstance(target, str) or not target.strip():
        what = "is missing" if target is None else f"= {target!r}"
        raise ConfigError(
            f"'{path}.class' {what}: expected 'package.module:Name' or a name given to "
            f"trainmon.writers.register_writer, e.g. {_EXAMPLE}"
        )
    kwargs = {str(k): v for k, v in spec.items() if k != "class"}
    factory = resolve_factory(target, f"{path}.class")
    _check_arguments(factory, kwargs, path, target)
    if inspect.isclass(factory) and not issubclass(factory, Writer):
        _check_writer_type(factory, f"{path}.class", target)
    return factory, kwargs


def build_custom_writer(index: int, spec: Mapping[str, Any]) -> Writer:
    """Build ``writers[index]`` from its spec (see the module docstring)."""
    path = f"writers[{index}]"
    factory, kwargs = check_custom_writer(index, spec)
    target = str(spec.get("class"))
    try:
        built = factory(**kwargs)
    except TypeError as exc:
        if _is_call_error(exc):
            raise ConfigError(
                f"'{path}': {target} does not take these arguments ({exc}); the keys other "
                f"than 'class' are passed to it as keyword arguments"
            ) from exc
        raise
    return as_writer(built, f"'{path}.class' = {target!r} built", target)


def as_writer(obj: Any, where: str, name: str | None = None) -> Writer:
    """``obj`` itself when it is a :class:`Writer`, else ``obj`` adapted to the contract when it
    has ``write``, ``flush`` and ``close``; otherwise a :class:`ConfigError` starting with
    ``where`` that names the missing methods."""
    if isinstance(obj, Writer):
        return obj
    missing = [m for m in _REQUIRED if not callable(getattr(obj, m, None))]
    if missing:
        raise ConfigError(
            f"{where} {type(obj).__name__} {obj!r:.80}, which is not a writer: it has no "
            f"{', '.join(missing)} method (subclass trainmon.writers.Writer, or give it write, "
            f"flush and close)"
        )
    return _DuckWriter(obj, name or type(obj).__name__)


def resolve_factory(target: str, key: str = "writers[0].class") -> WriterFactory:
    """What ``target`` names: a registered writer, or ``module:Name`` / ``module.Name``."""
    name = target.strip()
    if ":" not in name and "." not in name:
        registered = registered_writers()
        if name in registered:
            return registered[name]
        known = ", ".join(sorted(registered)) or "none yet"
        suggestion = did_you_mean(name, registered, end=" ")
        raise ConfigError(
            f"{key!r} = {target!r}: no writer is registered under that name; {suggestion}"
            f"registered names: {known}. Give 'package.module:Name' to import a class, or call "
            f"trainmon.writers.register_writer({name!r}, factory) before building the monitor"
        )
    module_name, _, attribute = name.partition(":") if ":" in name else name.rpartition(".")
    if not module_name or not attribute:
        raise ConfigError(f"{key!r} = {target!r}: expected 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"{key!r} = {target!r}: module {module_name!r} could not be imported "
            f"({type(exc).__name__}: {exc}); is it installed, or on sys.path?"
        ) from exc
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            names = [n for n in dir(found) if not n.startswith("_")]
            suggestion = did_you_mean(part, names, start="; ")
            raise ConfigError(
                f"{key!r} = {target!r}: {module_name!r} has no attribute {attribute!r}{suggestion}"
            ) from None
    if not callable(found):
        raise ConfigError(
            f"{key!r} = {target!r}: {attribute} is a {type(found).__name__}, not a writer class "
            f"or a function returning a writer"
        )
    factory: WriterFactory = found
    return factory


def _check_writer_type(cls: type, key: str, target: str) -> None:
    missing = [m for m in _REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(
            f"{key!r} = {target!r}: class {cls.__name__} is not a writer: it has no "
            f"{', '.join(missing)} method (subclass trainmon.writers.Writer, or give it write, "
            f"flush and close)"
        )


def _check_arguments(
    factory: WriterFactory, kwargs: dict[str, Any], path: str, target: str
) -> None:
    """Refuse keys the constructor does not take, naming the key, before calling it."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        parameters = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        unknown = [k for k in kwargs if k not in parameters]
        has_var_kw = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        if unknown and not has_var_kw:
            key = unknown[0]
            suggestion = did_you_mean(key, parameters, end=" ")
            raise ConfigError(
                f"unknown key '{path}.{key}': {target} takes no argument {key!r}; "
                f"{suggestion}it takes: {', '.join(parameters) or 'no arguments'}"
            ) from None
        raise ConfigError(f"'{path}': {target}{signature}: {exc}") from None


def _is_call_error(exc: TypeError) -> bool:
    """Whether ``exc`` came from calling ``factory`` itself (bad arguments), not from inside."""
    traceback = exc.__traceback__
    return traceback is not None and traceback.tb_next is None
