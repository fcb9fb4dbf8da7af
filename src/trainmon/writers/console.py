"""Progress lines: every ``steps_per_print`` steps, the latest value of each metric."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

from trainmon.events import Number, StepScalars
from trainmon.writers.base import Writer


def format_value(value: Number) -> str:
    """Short human form: 4 significant digits, scientific for very small or large numbers."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e12):
        return f"{value:.2e}"
    if magnitude >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


class ConsoleWriter(Writer):
    """Prints ``step N | name value | ...`` at the first step of each interval."""

    kind = "console"

    def __init__(self, steps_per_print: int, stream: TextIO | None = None) -> None:
        self.steps_per_print = steps_per_print
        self._stream = stream
        self.location = "stdout" if stream is None else getattr(stream, "name", "stream")
        self._latest: dict[str, Number] = {}
        self._last_bucket: int | None = None

    def write(self, records: Sequence[StepScalars]) -> None:
        for record in records:
            self._latest.update(record.values)
            bucket = record.step // self.steps_per_print
            if bucket != self._last_bucket:  # first step at or past the next multiple
                self._last_bucket = bucket
                self._print(record.step)

    def _print(self, step: int) -> None:
        parts = [f"step {step}"]
        parts += [f"{name} {format_value(v)}" for name, v in self._latest.items()]
        stream = self._stream or sys.stdout
        stream.write(" | ".join(parts) + "\n")

    def flush(self) -> None:
        (self._stream or sys.stdout).flush()

    def close(self) -> None:
        self.flush()
