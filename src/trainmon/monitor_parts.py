"""The parts the Monitor is composed of that depend on where it runs: the pipeline's settings,
the cross-rank reducer, the profile-on-demand watcher, and the adapter that hands windows to a
user's callback.

Why apart: each is decided once, at construction, from the config and the process's place;
the Monitor itself then only holds them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from trainmon.collect.profiler import ProfileOnDemand
from trainmon.config import AlertRuleConfig, PipelineConfig, TrainmonConfig
from trainmon.core.aggregate import WindowStats
from trainmon.core.callbacks import Callback
from trainmon.core.cross_rank import CrossRankReducer
from trainmon.core.events import StepScalars
from trainmon.core.goodput_live import LiveGoodput
from trainmon.core.observer import Observer
from trainmon.core.pipeline import DEFAULT_DRAIN_INTERVAL_S, STOP_RULES_DRAIN_INTERVAL_S
from trainmon.core.place import ProcessPlace
from trainmon.core.process import claim_starts
from trainmon.logging import get_logger
from trainmon.writers import run_identity

_log = get_logger("monitor")


def pipeline_settings(settings: PipelineConfig, rules: Iterable[AlertRuleConfig]) -> PipelineConfig:
    """``settings`` with ``drain_interval_s`` decided: when null, prompt (20 ms) if one of
    ``rules`` may stop training, else rarely (1 s), since each wake-up costs CPU beside the
    training thread (rules count their seconds on the values' own times, so lateness does
    not change what they send)."""
    if settings.drain_interval_s is not None:
        return settings
    stops = any(rule.action == "stop" for rule in rules)
    drain = STOP_RULES_DRAIN_INTERVAL_S if stops else DEFAULT_DRAIN_INTERVAL_S
    return replace(settings, drain_interval_s=drain)


def on_demand_profiler(
    config: TrainmonConfig, place: ProcessPlace, log_rank: int, current_step: Callable[[], int]
) -> ProfileOnDemand | None:
    """The profile-on-demand watcher for ``config.profiler`` (None when disabled);
    ``current_step`` should hold the monitor weakly, so the watcher never keeps it alive."""
    if not config.profiler.enabled:
        return None
    run_dir = run_identity(config, place).run_dir or Path.cwd()
    if config.trainmon.per_rank_output:  # one request file for every rank
        run_dir = run_dir.parent
    return ProfileOnDemand(
        config.profiler,
        run_dir.absolute(),
        rank=place.rank,
        world_size=place.world_size,
        leader=place.rank == log_rank,
        current_step=current_step,
    )


def cross_rank_reducer(
    config: TrainmonConfig, all_ranks_log: bool, log_rank: int
) -> CrossRankReducer | None:
    """A reducer when statistics across ranks are wanted and possible, else None."""
    setting = config.trainmon.cross_rank
    if setting == "off" or (setting == "auto" and not all_ranks_log):
        return None
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None
    if config.trainmon.window_seconds is not None:
        _log.warning("cross-rank statistics need step windows; window_seconds turns them off")
        return None
    return CrossRankReducer(config.trainmon.collective_timeout_s, dst=log_rank)


class WindowCallback(Observer):
    """Calls a user's ``on_window_end(stats)`` from the background thread."""

    def __init__(self, callback: Callback) -> None:
        self._callback = callback

    def on_window(self, window: WindowStats) -> Sequence[StepScalars]:
        self._callback.on_window_end(window)
        return ()


def with_starts(place: ProcessPlace) -> ProcessPlace:
    """``place`` with when this process's part of the job began (claimed once per process or
    ``trainmon.mark_start``: a later Monitor of the same process starts at its creation)."""
    if place.starts:
        return place
    return replace(place, starts=tuple(claim_starts().items()))


def live_goodput(config: TrainmonConfig, place: ProcessPlace) -> LiveGoodput | None:
    """The live goodput meter (``trainmon/goodput``, ...), its clock started at the process's
    start (or its launcher's, or ``trainmon.mark_start``) as ``place.starts`` tells, else now;
    None unless ``trainmon.live_goodput``."""
    if not config.trainmon.live_goodput:
        return None
    starts = [t for _, t in place.starts]
    return LiveGoodput(min(starts, default=time.time()), config.trainmon.goodput_window_s)
