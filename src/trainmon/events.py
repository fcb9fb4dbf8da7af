"""The immutable records that flow from the background pipeline into writers.

The training thread never builds these: it enqueues plain tuples, and the background thread
turns them into one :class:`StepScalars` per step, which is what every writer receives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Number = float | int


@dataclass(frozen=True, slots=True)
class StepScalars:
    """Every value logged for one step, in arrival order, with the wall time of the first one."""

    step: int
    wall_time: float
    values: Mapping[str, Number]
