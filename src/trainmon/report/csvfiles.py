"""Reading DeepSpeed's ``csv_monitor`` layout (one ``step,<name>`` file per metric) back.

The files are appended to across restarts and have no room for a restart marker, so a step
may appear more than once: the last row of a step wins, which is the resumed run's value
when a run was resumed from a checkpoint (see the README's "Checkpoints and resume").
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def metric_name(path: Path, header: str) -> str:
    """The metric a CSV file holds: the file name with ``_`` back to ``/`` before the last
    name component (the header), e.g. ``perf_step_time_ms.csv`` + ``step_time_ms`` →
    ``perf/step_time_ms``; the file name itself when the header does not end it."""
    stem = path.stem
    if header and stem.endswith("_" + header):
        return stem[: -len(header) - 1].replace("_", "/") + "/" + header
    return stem


def is_metric_csv(path: Path) -> bool:
    """True for a ``*.csv`` file whose header is ``step,<name>`` (the csv_monitor layout)."""
    if path.suffix != ".csv" or not path.is_file():
        return False
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return f.readline().startswith("step,")


def read_metric_csv(path: str | os.PathLike[str]) -> tuple[str, list[int], list[float], int]:
    """``(metric name, steps ascending, values, rows skipped)``: the last row of a step wins,
    rows that are not ``<int>,<number>`` (a line cut short by a killed run) are skipped."""
    path = Path(path)
    latest: dict[int, float] = {}
    skipped = 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(f)
        header = next(rows, ["step", path.stem])
        for row in rows:
            if len(row) != 2:
                skipped += 1
                continue
            try:
                step = int(row[0])
                text = row[1].strip()
                value = _NON_FINITE.get(text.lower())
                latest[step] = float(text) if value is None else value
            except ValueError:
                skipped += 1
    steps = sorted(latest)
    name = metric_name(path, header[1] if len(header) > 1 else "")
    return name, steps, [latest[s] for s in steps], skipped
