"""Goodput: how much of a job's wall time, across its restarts, went into steps that were kept.

The wall time runs from the first attempt's start (its process's, see
:mod:`trainmon.core.process`) to the last attempt's end. Each attempt's time is split by
:mod:`trainmon.report.attempt_time` (the rule the timeline draws too), cut at its step ends (a
step runs from the previous step's end; the first one from its end less its
``perf/step_time_ms``):

* before the first step: ``startup_s``;
* a step's time: productive when the step was kept, ``lost_work_s`` when a later attempt
  redid it; from a kept step, its ``perf/data_ms`` (waits inside a data loader trainmon saw)
  is ``data_wait_s``, its ``perf/between_steps_ms`` (from ``step()`` to the next forward,
  outside such a loader) less the spans inside the step is ``between_steps_s`` and, in the
  step where a stall alert fired, what it took beyond the attempt's median step is
  ``stall_s``;
* checkpoint saves and loads and evaluations that trainmon timed (journal ``span`` records)
  are ``checkpoint_save_s``, ``checkpoint_load_s`` and ``eval_s`` wherever they fall;
* from one attempt's last sign of life to the next one's start: ``downtime_s``;
* the rest (after the last step: closing, untimed evaluation or saving): ``other_s``.

So ``productive_s`` plus the badput is the wall time, and ``goodput`` is their ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainmon.report.attempt_time import attempt_pieces
from trainmon.report.attempts import Attempt

#: The badput categories, in the order they are shown.
BADPUT = (
    "startup_s",
    "checkpoint_save_s",
    "checkpoint_load_s",
    "lost_work_s",
    "downtime_s",
    "data_wait_s",
    "between_steps_s",
    "eval_s",
    "stall_s",
    "other_s",
)


@dataclass
class Goodput:
    """The split of a job's wall time; ``per_attempt`` holds each attempt's own split (the
    downtime before it included), for the report's stacked bar."""

    wall_s: float
    productive_s: float
    badput: dict[str, float]
    attempts: list[Attempt]
    per_attempt: list[dict[str, float]] = field(default_factory=list)

    @property
    def goodput(self) -> float | None:
        """``productive_s / wall_s`` (None for a zero wall time)."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    @property
    def restarts(self) -> int:
        """The number of attempts − 1."""
        return max(0, len(self.attempts) - 1)

    @property
    def redone_steps(self) -> int:
        """Steps run more than once: each earlier run of them counted."""
        return sum(len(a.redone) for a in self.attempts)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: exactly ``wall_s``, ``productive_s``, ``goodput``,
        ``restarts``, ``badput`` and ``attempts``."""
        return {
            "wall_s": self.wall_s,
            "productive_s": self.productive_s,
            "goodput": self.goodput,
            "restarts": self.restarts,
            "badput": dict(self.badput),
            "attempts": [
                {**a.as_dict(), "seconds": split}
                for a, split in zip(self.attempts, self.per_attempt, strict=True)
            ],
        }


def measure(attempts: Sequence[Attempt]) -> Goodput:
    """Split the attempts' wall time (see the module doc)."""
    ordered = sorted(attempts, key=lambda a: a.start)
    if not ordered:
        return Goodput(0.0, 0.0, dict.fromkeys(BADPUT, 0.0), [], [])
    wall = max(a.finish for a in ordered) - ordered[0].start
    splits = []
    previous_finish: float | None = None
    for attempt in ordered:
        split = _split(attempt)
        if previous_finish is not None:
            split["downtime_s"] += max(0.0, attempt.start - previous_finish)
        previous_finish = max(previous_finish or attempt.finish, attempt.finish)
        splits.append(split)
    total = {key: sum(s[key] for s in splits) for key in ("productive_s", *BADPUT)}
    # the remainder (after the last steps; overlapping attempts would make it negative)
    total["other_s"] = 0.0
    assigned = sum(total.values())
    total["other_s"] = max(0.0, wall - assigned)
    productive = total.pop("productive_s")
    return Goodput(wall, productive, total, list(ordered), splits)


def _split(attempt: Attempt) -> dict[str, float]:
    """One attempt's time from its start to its finish, by category: the sum of its pieces
    (:func:`~trainmon.report.attempt_time.attempt_pieces`, which the timeline draws)."""
    out = dict.fromkeys(("productive_s", *BADPUT), 0.0)
    for category, low, high in attempt_pieces(attempt):
        out[category] += high - low
    return out
