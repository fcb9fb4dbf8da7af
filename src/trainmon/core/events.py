"""The immutable records that flow from the background pipeline into writers.

The training thread never builds these: it enqueues plain tuples, and the background thread
turns them into one :class:`StepScalars` per step, which is what every writer receives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Number = float | int


@dataclass(slots=True)
class StepScalars:
    """Every value logged for one step, in arrival order, with the wall time of the first one
    (read-only once handed over, by convention: one is built per step on the background
    thread, where a frozen dataclass's ``__init__`` costs four times as much)."""

    step: int
    wall_time: float
    values: Mapping[str, Number]


def same_name_runs(
    records: Sequence[StepScalars],
) -> list[tuple[tuple[str, ...], list[StepScalars]]]:
    """``records`` cut into runs of consecutive records with the same names in the same order
    (a training loop logs the same names every step), each with those names: a run's values
    can be read name by name with one ``zip`` in C instead of value by value in Python."""
    runs: list[tuple[tuple[str, ...], list[StepScalars]]] = []
    names: tuple[str, ...] | None = None
    run: list[StepScalars] = []
    for record in records:
        these = tuple(record.values)
        if these != names:
            names, run = these, []
            runs.append((these, run))
        run.append(record)
    return runs


# ---- beyond scalars: histograms, text and hyper-parameters ----------------------------------
# Built on the background thread and handed to :meth:`Writer.write_extras` in stream order
# (after the scalars logged before them). Writers that cannot show a kind ignore it.


@dataclass(frozen=True, slots=True)
class Histogram:
    """The distribution of one tensor or array at one step, in equal-width buckets.

    ``edges`` has one more entry than ``counts``; bucket ``i`` covers ``[edges[i],
    edges[i+1])`` (the last one closed). ``num``, ``sum`` and ``sum_squares`` cover the finite
    values; NaN and ±Inf are counted in ``non_finite`` and left out of the buckets.
    """

    name: str
    step: int
    wall_time: float
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    min: float
    max: float
    num: int
    sum: float
    sum_squares: float
    non_finite: int = 0


@dataclass(frozen=True, slots=True)
class Text:
    """A piece of text logged under ``name`` at one step (a sample, a prompt, a note)."""

    name: str
    step: int
    wall_time: float
    text: str


#: A hyper-parameter value as every backend can store it.
HparamValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Hparams:
    """The run's hyper-parameters (flat ``a.b.c`` keys) and the metrics they are judged by."""

    wall_time: float
    step: int
    hparams: Mapping[str, HparamValue]
    metrics: Mapping[str, Number]


@dataclass(frozen=True, slots=True)
class Progress:
    """How many steps the run will take (:meth:`~trainmon.Monitor.set_total_steps`)."""

    total_steps: int


#: What a :class:`Span` times: the parts of an attempt that are neither training nor idle.
SPAN_KINDS = ("checkpoint_save", "checkpoint_load", "eval")


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of the run's wall time spent on something other than training steps (a
    checkpoint saved or loaded, an evaluation), timed by trainmon: what ``trainmon goodput``
    counts as that kind of badput. ``step`` is the step the monitor was at."""

    kind: str
    step: int
    start_time: float
    end_time: float


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How this process's run (one attempt of the job) ended: ``status`` as the writers'
    ``finalize`` gets it, ``stop_reason`` when an alert rule stopped it. A killed process
    leaves none, which is how readers tell a kill."""

    wall_time: float
    step: int
    status: str
    stop_reason: str | None = None


#: What :meth:`~trainmon.core.writer.Writer.write_extras` receives.
Extra = Histogram | Text | Hparams | Progress | Span | AttemptEnd
