"""Exceptions users can catch by name, each carrying enough context to act on."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from trainmon.redact import credentials_in


class TrainmonError(Exception):
    """Base class of every error trainmon raises on purpose."""


class ConfigError(TrainmonError, ValueError):
    """A config key or value is wrong; the message names the key path, the value and the fix.

    Every message is redacted (user info and token-like query values of any URL in it are
    masked), since a value quoted back may be a URL with credentials. ``problems`` holds each
    mistake's message when one error reports several (``trainmon validate`` prints them all).
    """

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        self.problems: tuple[str, ...] = tuple(credentials_in(p) for p in problems) or (
            credentials_in(message),
        )
        super().__init__(credentials_in(message))

    @classmethod
    def of_all(cls, errors: list[ConfigError]) -> ConfigError:
        """One error for several: the single one as it is, else one listing every problem."""
        if len(errors) == 1:
            return errors[0]
        problems = [p for error in errors for p in error.problems]
        listed = "\n".join(f"  - {p}" for p in problems)
        return cls(f"{len(problems)} problems in the config:\n{listed}", problems)


class MissingExtraError(TrainmonError, ImportError):
    """An optional backend's package is not installed; the message names the pip command."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed. "
            f'Install it with: pip install "trainmon[{extra}]"'
        )


class TrainingStopped(TrainmonError):
    """Raised at a step boundary after an alert rule with ``"action": "stop"`` fired."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"training stopped by trainmon: {reason}")


def did_you_mean(
    value: object, choices: Iterable[str], *, cutoff: float = 0.6, start: str = "", end: str = ""
) -> str:
    """``did you mean 'x'?`` for the closest of ``choices`` (with ``start``/``end`` around it),
    or ``""`` when none is close: the hint every "unknown key or value" error carries."""
    hint = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=cutoff)
    return f"{start}did you mean {hint[0]!r}?{end}" if hint else ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" when it has none): what a one-line
    warning quotes, leaving the rest (an SDK's multi-line dump) to the debug log."""
    return (str(exc).strip().splitlines() or [""])[0]
