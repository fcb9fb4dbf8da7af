"""A run's journal as the records its live writers were given, once per step: what ``sync``
replays into a backend.

A job folder may hold several attempts (a run restarted into the same folder, from a
checkpoint or from scratch; each starts with a ``meta`` line). A step that a later attempt
did again counts once, with that attempt's values: the surviving timeline of
:class:`~trainmon.journal.Timeline`, the rule every reader and ``goodput`` follow. Within
what is kept, several lines of one step merge, the last write of a name winning.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmon.config import DEFAULT_JOB_NAME
from trainmon.core.events import Extra, Histogram, Hparams, HparamValue, Number, StepScalars, Text
from trainmon.journal import read_journal
from trainmon.report.loading import find_journal
from trainmon.report.model import RunError

_STEPPED = ("scalars", "histogram", "text")


@dataclass
class Replay:
    """What one journal holds, each step once: scalars and extras in step order."""

    journal: Path
    job: str
    #: Stable across reads of the same journal (from its first ``meta`` line): the tag that
    #: lets a later ``sync`` find the run it made before.
    run_id: str
    attempts: int
    steps: list[StepScalars] = field(default_factory=list)
    extras: list[Histogram | Text] = field(default_factory=list)
    hparams: Hparams | None = None
    #: What the reader chose for the user (rank 0 of several), to be shown.
    notes: list[str] = field(default_factory=list)
    #: ``(host, pid)`` of each process that wrote an attempt (whose live files are this run's).
    processes: set[tuple[str, int]] = field(default_factory=set)

    @property
    def value_count(self) -> int:
        """Scalar values over all kept steps."""
        return sum(len(record.values) for record in self.steps)

    def batches(self, size: int = 256) -> Iterator[tuple[Sequence[StepScalars], Sequence[Extra]]]:
        """``(scalars, extras)`` pairs in step order (hyper-parameters first): a backend that
        needs increasing steps (W&B) gets each step's scalars before that step's extras."""
        if self.hparams is not None:
            yield [], [self.hparams]
        extras = self.extras
        taken = 0
        batch: list[StepScalars] = []
        for record in self.steps:
            if taken < len(extras) and extras[taken].step < record.step:
                start = taken  # extras between the batch's last step and this one
                while taken < len(extras) and extras[taken].step < record.step:
                    taken += 1
                yield batch, extras[start:taken]
                batch = []
            batch.append(record)
            if taken < len(extras) and extras[taken].step == record.step:
                start = taken
                while taken < len(extras) and extras[taken].step == record.step:
                    taken += 1
                yield batch, extras[start:taken]
                batch = []
            elif len(batch) >= size:
                yield batch, []
                batch = []
        yield batch, extras[taken:]


def load_replay(path: str | Path) -> Replay:
    """The replay of the journal at ``path`` (a ``metrics.jsonl`` or the folder holding it);
    :class:`RunError` when there is none or it cannot be read."""
    journal, note = find_journal(Path(path))
    if journal is None:
        raise RunError(
            f"{path}: no trainmon journal (metrics.jsonl) here; sync replays a journal, so "
            "enable the jsonl writer in the run's config"
        )
    damaged: list[int] = []
    metas: list[dict[str, Any]] = []
    records = read_journal(journal, damaged=damaged)  # the surviving timeline, as a stream
    replay = Replay(journal=journal, job=DEFAULT_JOB_NAME, run_id="", attempts=1)
    _keep(records, replay, metas)
    job = next((m["job"] for m in metas if isinstance(m.get("job"), str) and m["job"]), None)
    replay.job = job or DEFAULT_JOB_NAME
    replay.run_id = _run_id(metas[0] if metas else None, journal)
    replay.attempts = max(1, len(metas))
    replay.processes = {(str(m.get("host")), m["pid"]) for m in metas if type(m.get("pid")) is int}
    if note:
        replay.notes.append(note)
    if damaged:
        replay.notes.append(
            f"skipped {len(damaged)} unreadable line(s) (first: line {damaged[0]} of "
            f"{journal.name})"
        )
    return replay


def _run_id(meta: Mapping[str, Any] | None, journal: Path) -> str:
    """20 hex digits from what the first attempt wrote first (its job, host, pid, time and
    attempt id)."""
    if meta is None:
        origin = str(journal.resolve())
    else:
        keys = ("job", "host", "pid", "time", "rank", "attempt")
        origin = "|".join(str(meta.get(k)) for k in keys)
    return hashlib.sha1(origin.encode()).hexdigest()[:20]


def _step(record: Mapping[str, Any]) -> int | None:
    step = record.get("step")
    if record.get("kind") in _STEPPED and type(step) is int:
        return step
    return None


def _keep(records: Iterable[dict[str, Any]], replay: Replay, metas: list[dict[str, Any]]) -> None:
    values: dict[int, dict[str, Number]] = {}
    times: dict[int, float] = {}
    extras: dict[tuple[str, str, int], Histogram | Text] = {}
    hparams: dict[str, HparamValue] = {}
    metrics: dict[str, Number] = {}
    hparams_time: float | None = None
    hparams_step = 0
    for record in records:
        kind = record.get("kind")
        if kind == "meta":
            metas.append(record)
            continue
        if kind == "hparams":
            hparams.update(_dict(record.get("hparams")))
            metrics.update(_numbers(record.get("metrics")))
            hparams_time = _time(record) if hparams_time is None else hparams_time
            hparams_step = _int(record.get("step"), hparams_step)
            continue
        step = _step(record)
        if step is None:
            continue
        if kind == "scalars":
            step_values = values.get(step)
            if step_values is None:
                step_values = values[step] = {}
                times[step] = _time(record)
            step_values.update(_numbers(record.get("values")))
        elif kind == "histogram":
            histogram = _histogram(record, step)
            if histogram is not None:
                extras.pop(("h", histogram.name, step), None)  # the latest goes last
                extras[("h", histogram.name, step)] = histogram
        elif kind == "text" and isinstance(record.get("name"), str):
            text = Text(record["name"], step, _time(record), str(record.get("text", "")))
            extras.pop(("t", text.name, step), None)
            extras[("t", text.name, step)] = text
    replay.steps = [StepScalars(step, times[step], values[step]) for step in sorted(values)]
    replay.extras = sorted(extras.values(), key=lambda extra: extra.step)
    if hparams or metrics:
        replay.hparams = Hparams(hparams_time or 0.0, hparams_step, hparams, metrics)


def _time(record: Mapping[str, Any]) -> float:
    value = record.get("time")
    return float(value) if isinstance(value, int | float) else 0.0


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


def _numbers(found: Any) -> dict[str, Number]:
    if not isinstance(found, dict):
        return {}
    return {
        str(k): v
        for k, v in found.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _dict(found: Any) -> dict[str, HparamValue]:
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str | int | float | bool)}


def _histogram(record: Mapping[str, Any], step: int) -> Histogram | None:
    edges, counts = record.get("edges"), record.get("counts")
    name = record.get("name")
    if not (isinstance(name, str) and isinstance(edges, list) and isinstance(counts, list)):
        return None
    try:
        return Histogram(
            name=name,
            step=step,
            wall_time=_time(record),
            edges=tuple(float(e) for e in edges),
            counts=tuple(int(c) for c in counts),
            min=float(record.get("min", math.nan)),
            max=float(record.get("max", math.nan)),
            num=int(record.get("num", sum(int(c) for c in counts))),
            sum=float(record.get("sum", 0.0)),
            sum_squares=float(record.get("sum_squares", 0.0)),
            non_finite=int(record.get("non_finite", 0)),
        )
    except (TypeError, ValueError):
        return None
