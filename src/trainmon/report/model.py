"""What a run is once read: one series per metric, its alerts, and where it came from.

Metric names are kept as they were written (``train/loss``, or DeepSpeed's own
``Train/Samples/train_loss``); :func:`role` maps the names trainmon knows under other spellings
onto trainmon's, so summaries and charts find "the loss" or "the forward time" in either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmon.errors import TrainmonError
from trainmon.report.wallclock import StepClock

#: Chart sections of the report, in page order; a name's first path component picks one.
FAMILIES = ("train", "eval", "perf", "mem", "comm", "other")

_FAMILY_OF_PREFIX = {
    "train": "train",
    "training": "train",
    "eval": "eval",
    "evaluation": "eval",
    "val": "eval",
    "valid": "eval",
    "validation": "eval",
    "test": "eval",
    "perf": "perf",
    "performance": "perf",
    "throughput": "perf",
    "time": "perf",
    "timing": "perf",
    "mem": "mem",
    "memory": "mem",
    "comm": "comm",
    "comms": "comm",
}

#: DeepSpeed's own TensorBoard/CSV tags (lower-cased) → the trainmon metric they measure.
DEEPSPEED_ROLES = {
    "train/samples/train_loss": "train/loss",
    "train/samples/lr": "train/lr",
    "train/samples/loss_scale": "train/loss_scale",
    "train/samples/elapsed_time_ms_forward": "perf/forward_ms",
    "train/samples/elapsed_time_ms_backward": "perf/backward_ms",  # inner + allreduce
    "train/samples/elapsed_time_ms_backward_inner": "perf/backward_inner_ms",
    "train/samples/elapsed_time_ms_backward_allreduce": "perf/backward_allreduce_ms",
    "train/samples/elapsed_time_ms_step": "perf/optimizer_ms",
}

#: Suffixes of the cross-rank window metrics (see :mod:`trainmon.core.cross_rank`).
CROSS_RANK_STATS = ("min", "mean", "max", "argmax_rank", "argmax_node_rank")

#: The parts of a step, as (label, metric), in the order they are stacked. They are disjoint
#: (the backward's gradient all-reduce is in comm, not in backward), so they add up to at most
#: the step time; the rest is shown as "other".
BREAKDOWN = (
    ("forward", "perf/forward_ms"),
    ("backward", "perf/backward_inner_ms"),
    ("optimizer", "perf/optimizer_ms"),
    ("comm", "perf/comm_ms"),
    ("data", "perf/data_ms"),
    ("between steps", "perf/between_steps_ms"),
)
#: A part's older or coarser name, read when a run lacks the part's own: trainmon before the
#: disjoint breakdown, and DeepSpeed without ``backward_inner``, logged ``perf/backward_ms``.
BREAKDOWN_FALLBACK = {"perf/backward_inner_ms": "perf/backward_ms"}
STEP_TIME = "perf/step_time_ms"


class RunError(TrainmonError):
    """A path holds no readable run, or a run holds nothing to show; the message says which."""


def role(name: str) -> str:
    """The trainmon name of what ``name`` measures (``name`` itself when it is not an alias)."""
    return DEEPSPEED_ROLES.get(name.lower(), name)


def family(name: str) -> str:
    """The report section of a metric: its first path component, or ``other``."""
    canonical = role(name)
    head, _, rest = canonical.partition("/")
    found = _FAMILY_OF_PREFIX.get(head.lower(), "other") if rest else "other"
    if found in ("train", "other") and canonical.rsplit("/", 1)[-1].startswith("elapsed_time"):
        return "perf"  # DeepSpeed's Train/Samples/elapsed_time_ms_* timers
    return found


def cross_rank_split(name: str) -> tuple[str, str] | None:
    """``("perf/step_time_ms", "max")`` for ``perf/step_time_ms/max``; None for other names."""
    base, _, stat = name.rpartition("/")
    if base and stat in CROSS_RANK_STATS and "/" in base:
        return base, stat
    return None


@dataclass
class Series:
    """One metric over a run: ``steps`` ascending and unique, ``values`` floats (NaN kept)."""

    name: str
    steps: Sequence[int]
    values: Sequence[float]
    x_unit: str = "step"
    """``"samples"`` for DeepSpeed's ``Train/Samples/*`` tags, whose x is samples seen."""
    cache: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    """Computed once per bucket count: see :func:`trainmon.report.downsample.profile`."""

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class Run:
    """Everything read from one run folder, journal or event file."""

    name: str
    """Short label for tables and legends (the job name, else the folder name)."""
    path: Path
    """The journal file or the folder of event files that was read."""
    source: str
    """``"trainmon journal"`` or ``"TensorBoard events"``."""
    series: dict[str, Series] = field(default_factory=dict)
    windows: Sequence[dict[str, Any]] = field(default_factory=list)
    """The journal's ``window`` records, as read (empty for TensorBoard folders)."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """Lines of ``alerts.jsonl`` next to the run (``Alert.as_dict()``), in file order."""
    meta: dict[str, Any] = field(default_factory=dict)
    """The last ``meta`` record of the journal (job, rank, world_size, host, ...)."""
    hparams: dict[str, Any] = field(default_factory=dict)
    """The journal's ``hparams`` records merged in order (flat ``a.b`` keys; later wins)."""
    histograms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The journal's ``histogram`` records by name, in file order."""
    texts: list[dict[str, Any]] = field(default_factory=list)
    """The journal's ``text`` records, in file order."""
    start_time: float | None = None
    end_time: float | None = None
    step_count: int = 0
    """Distinct steps that logged anything."""
    clock: StepClock | None = None
    """When each step was logged (the "wall time" x axis); None where nothing says (CSV)."""
    notes: list[str] = field(default_factory=list)
    """What was skipped or guessed while reading, for the user to see."""

    @property
    def x_unit(self) -> str:
        """``"samples"`` when every series counts samples (a DeepSpeed run), else ``"step"``."""
        units = {s.x_unit for s in self.series.values()}
        return "samples" if units == {"samples"} else "step"

    @property
    def scalar_count(self) -> int:
        """How many values the run holds in all."""
        return sum(len(s) for s in self.series.values())

    def find(self, metric: str) -> Series | None:
        """The series measuring ``metric`` (a trainmon name), under its own name or an alias."""
        found = self.series.get(metric)
        if found is not None:
            return found
        for name, series in self.series.items():
            if role(name) == metric:
                return series
        return None

    def find_part(self, metric: str) -> Series | None:
        """The series of a breakdown part, or of its :data:`BREAKDOWN_FALLBACK` name."""
        found = self.find(metric)
        if found is None and metric in BREAKDOWN_FALLBACK:
            found = self.find(BREAKDOWN_FALLBACK[metric])
        return found

    def require_metrics(self) -> None:
        """Raise :class:`RunError` when the run holds no values yet (say why, and where)."""
        if self.series:
            return
        detail = "; ".join(self.notes)
        raise RunError(
            f"{self.path}: no metric values yet ({self.source}"
            + (f"; {detail}" if detail else "")
            + "): was the run killed before its first flush, or is it still starting?"
        )
