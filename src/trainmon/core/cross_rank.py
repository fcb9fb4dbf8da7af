"""Statistics across ranks: each rank's window row, gathered on the logging rank.

The same one gather per window carries each rank's host-wide system figures, from which the
logging rank writes statistics across nodes (:mod:`trainmon.core.nodes`). Which process this
is (rank, world size, logging rank) lives in :mod:`trainmon.core.place`.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any

from trainmon.core.aggregate import STEP_TIME_METRIC, WindowStats
from trainmon.core.events import Number
from trainmon.core.nodes import (
    HOST_METRICS,
    IDENTITY_COLUMNS,
    Node,
    identity_row,
    nodes_of,
    summarise_nodes,
)
from trainmon.logging import get_logger

_log = get_logger("distributed")


# ---- cross-rank statistics ------------------------------------------------------------------


class _MonitoringCall(threading.local):
    active = False


#: Set while trainmon itself runs a collective, so the comms logger does not count it as the
#: training loop's communication time.
MONITORING_CALL = _MonitoringCall()

#: The per-rank window statistics gathered on the logging rank: (metric, which window statistic).
REDUCED_METRICS: tuple[tuple[str, str], ...] = (
    ("perf/step_time_ms", "mean"),
    ("perf/forward_ms", "mean"),
    ("perf/backward_inner_ms", "mean"),
    ("perf/optimizer_ms", "mean"),
    ("perf/comm_ms", "mean"),
    ("perf/data_ms", "mean"),
    ("perf/between_steps_ms", "mean"),
    ("perf/samples_per_sec", "mean"),
    ("perf/tokens_per_sec", "mean"),
    ("perf/tflops", "mean"),
    ("mem/allocated_mb", "last"),
    ("mem/peak_allocated_mb", "max"),
    ("mem/reserved_mb", "last"),
    ("mem/rss_mb", "last"),
    ("mem/peak_rss_mb", "max"),
    # system metrics (trainmon.collect.system): gpu0 is each rank's own (first) GPU
    ("sys/process_cpu_percent", "mean"),
    ("sys/process_rss_mb", "last"),
    ("sys/disk_read_mb", "mean"),
    ("sys/disk_write_mb", "mean"),
    ("sys/gpu0/util_percent", "mean"),
    ("sys/gpu0/mem_used_mb", "last"),
    ("sys/gpu0/power_w", "mean"),
    ("sys/gpu0/temp_c", "max"),
    ("sys/gpu0/sm_clock_mhz", "mean"),
    ("sys/gpu0/throttle", "max"),
)
#: The job's throughput: every rank's work over the window's wall time (see :func:`job_rate`).
JOB_TOTALS = (
    ("perf/samples_per_sec", "perf/job_samples_per_sec"),
    ("perf/tokens_per_sec", "perf/job_tokens_per_sec"),
)


def elapsed_ms(stats: Mapping[str, Any]) -> float:
    """A rank's time over a window: the sum of its step times (NaN without a step time)."""
    step = stats.get(STEP_TIME_METRIC)
    return math.nan if step is None else float(step.mean) * step.count


def job_rate(rates: Sequence[float], elapsed: Sequence[float]) -> float:
    """The job's rate over a window from each rank's window rate and elapsed time.

    A rank's work is its rate times its elapsed time (its window rate is work over time, see
    :mod:`trainmon.core.aggregate`); the window's wall time is the slowest rank's elapsed
    time. So the job's rate is the total work over that, never a sum of per-step means. Ranks
    without a rate are left out; without any elapsed time the rates are summed (same wall time
    assumed).
    """
    pairs = [(r, t) for r, t in zip(rates, elapsed, strict=True) if r == r]
    timed = [(r, t) for r, t in pairs if 0 < t < math.inf]
    if timed and len(timed) == len(pairs):
        return math.fsum(r * t for r, t in timed) / max(t for _, t in timed)
    return math.fsum(r for r, _ in pairs)


def busy_ms(stats: Mapping[str, Any]) -> float:
    """Time a rank spent outside collectives per step: step time minus communication wait.

    In synchronous data parallelism every rank's step time comes out alike, because the fast
    ranks wait for the slow one inside the gradient all-reduce; the slowest rank is the one
    with the most time *outside* collectives.
    """
    step = stats.get("perf/step_time_ms")
    if step is None:
        return math.nan
    comm = stats.get("perf/comm_ms")
    return float(step.mean) - (float(comm.mean) if comm is not None else 0.0)


#: Where a row keeps its elapsed time: after ``last_step``, ``busy_ms`` and REDUCED_METRICS.
ELAPSED_COLUMN = 2 + len(REDUCED_METRICS)
#: The system metrics reduced across nodes: the row's ``sys/*`` columns, with HOST_METRICS.
NODE_COLUMNS: tuple[tuple[str, int], ...] = (
    *((name, 2 + i) for i, (name, _) in enumerate(REDUCED_METRICS) if name.startswith("sys/")),
    *((name, ELAPSED_COLUMN + 1 + i) for i, (name, _) in enumerate(HOST_METRICS)),
)


def pack_window(window: WindowStats) -> list[float]:
    """One rank's row: [last_step, busy_ms, each REDUCED_METRICS statistic or NaN, elapsed_ms,
    each HOST_METRICS statistic or NaN]."""
    metrics = window.metrics
    row = [float(window.last_step), busy_ms(metrics)]
    for name, stat in REDUCED_METRICS:
        found = metrics.get(name)
        row.append(math.nan if found is None else float(getattr(found, stat)))
    row.append(elapsed_ms(metrics))
    for name, stat in HOST_METRICS:
        found = metrics.get(name)
        row.append(math.nan if found is None else float(getattr(found, stat)))
    return row


def summarise_ranks(
    rows: Sequence[Sequence[float]], node_of: Sequence[int] | None = None
) -> dict[str, Number]:
    """Cross-rank metrics from every rank's row (row index = rank).

    ``<name>/min``, ``<name>/mean``, ``<name>/max`` and ``<name>/argmax_rank`` for each metric
    some rank reported; ``perf/job_*`` rates (:func:`job_rate`); ``perf/straggler_ratio``
    (slowest rank's busy time over the median rank's, the lower median for an even count, so
    with two ranks it is slow over fast) and ``perf/slowest_rank``. With ``node_of`` (each
    rank's node rank) and two nodes or more, the ``sys/*`` statistics across nodes too
    (:func:`trainmon.core.nodes.summarise_nodes`).
    """
    out: dict[str, Number] = {}
    elapsed = [row[ELAPSED_COLUMN] for row in rows]
    for column, (name, _) in enumerate(REDUCED_METRICS, start=2):
        present = [
            (row[column], rank) for rank, row in enumerate(rows) if row[column] == row[column]
        ]
        if not present:
            continue
        values = [v for v, _ in present]
        top_value, top_rank = max(present)
        out[f"{name}/min"] = min(values)
        out[f"{name}/mean"] = sum(values) / len(values)
        out[f"{name}/max"] = top_value
        out[f"{name}/argmax_rank"] = top_rank
        for source, total in JOB_TOTALS:
            if source == name:
                out[total] = job_rate([row[column] for row in rows], elapsed)
    busy = [(row[1], rank) for rank, row in enumerate(rows) if row[1] == row[1]]
    if busy:
        median = statistics.median_low(v for v, _ in busy)  # 2 ranks: slow over fast
        slowest_value, slowest_rank = max(busy)
        out["perf/slowest_rank"] = slowest_rank
        if median > 0:
            out["perf/straggler_ratio"] = slowest_value / median
    if node_of is not None:
        columns = {name: [row[column] for row in rows] for name, column in NODE_COLUMNS}
        out.update(summarise_nodes(columns, node_of))
    return out


class CrossRankReducer:
    """Gathers every rank's window row on ``dst``, the logging rank: one ``gather`` per window.

    Uses its own gloo process group (created once, on the training thread, by every rank), so
    it runs on the CPU from the background thread and never touches the training stream. A
    rank that does not answer within ``timeout_s`` (crashed, hung, or logging other steps)
    ends cross-rank statistics with one clear error; training is not affected.

    The first gather's row also carries the rank's node rank and host (every rank's first
    gather is the same window, so the rows agree in length): from then on ``dst`` knows the
    :attr:`nodes`, and adds the statistics across nodes to each window's.
    """

    def __init__(self, timeout_s: float, dst: int = 0) -> None:
        import datetime

        import torch.distributed as dist

        self._dist = dist
        self.timeout_s = timeout_s
        self.dst = dst
        self._group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.disabled = False
        self._warned_steps = False
        self._gathered_step: int | None = None
        self._table: Any = None
        self.nodes: list[Node] = []
        """The job's nodes (on ``dst``, after the first gather)."""
        self._node_of: list[int] | None = None

    def close(self) -> None:
        """Destroy the monitoring group (every rank, after the last gather), so no gloo group
        of trainmon's is left for interpreter exit to tear down (that sometimes aborted the
        process when the training framework never destroys its own process group)."""
        group, self._group = self._group, None
        self.disabled = True
        dist = self._dist
        if group is None or not dist.is_initialized():
            return
        try:
            dist.destroy_process_group(group)
        except Exception as exc:  # a group the backend already dropped
            _log.debug("could not destroy the monitoring process group: %s", exc)

    def __call__(self, window: WindowStats) -> dict[str, Number] | None:
        """This window's cross-rank metrics on rank ``dst``; None elsewhere or once disabled.

        A window ending no later than the last gathered one holds only values logged late for
        that window's last step (a framework's evaluation logs after the step); whether such a
        window exists depends on when each rank's background thread drained, so it is not
        gathered: every rank gathers exactly once per window of steps, or they would desync.
        """
        if self.disabled:
            return None
        last = self._gathered_step
        if last is not None and window.last_step <= last:
            return None
        self._gathered_step = window.last_step
        import torch

        first = last is None
        row = pack_window(window)
        width = len(row)
        mine = torch.tensor(row + identity_row() if first else row, dtype=torch.float64)
        rows = None
        if self.rank == self.dst:  # one (world, row) buffer: gather fills its rows, tolist() reads
            if self._table is None or self._table.shape[1] != mine.numel():
                self._table = torch.empty((self.world_size, mine.numel()), dtype=torch.float64)
            rows = list(self._table.unbind(0))
        MONITORING_CALL.active = True
        try:
            self._dist.gather(mine, rows, dst=self.dst, group=self._group)
        except Exception as exc:
            self.disabled = True
            _log.error(
                "cross-rank statistics stopped: not every rank answered within %.0f s (a rank "
                "crashed, hung, or logs different steps): %s. Training carries on; per-rank "
                "statistics are still written.",
                self.timeout_s,
                exc,
            )
            return None
        finally:
            MONITORING_CALL.active = False
        if rows is None or self._table is None:
            return None
        table = self._table.tolist()
        if first:
            self._learn_nodes([r[width : width + IDENTITY_COLUMNS] for r in table])
            table = [r[:width] for r in table]
        steps = {r[0] for r in table}
        if len(steps) > 1 and not self._warned_steps:
            self._warned_steps = True
            _log.warning("ranks closed windows at different steps %s; are they in step?", steps)
        return summarise_ranks(table, self._node_of)

    def _learn_nodes(self, identities: list[list[float]]) -> None:
        """Each rank's node, from the first gather; named once in the log (several nodes)."""
        self._node_of, self.nodes = nodes_of(identities)
        if len(self.nodes) > 1:
            _log.info(
                "%d nodes, reduced across in sys/*/nodes/*: %s",
                len(self.nodes),
                "; ".join(node.describe() for node in self.nodes),
            )


# ---- the default group's lifetime -----------------------------------------------------------


def release_default_group_references() -> int:
    """Let ``torch.distributed.destroy_process_group()`` really free the default group.

    Some of torch's own modules bind ``group.WORLD`` as a default argument when they are
    imported (``torch.distributed.nn.functional``: ten functions; ZeRO's and FSDP's grad
    scaler: one each). Imported after ``init_process_group`` (building the first optimizer
    imports the first, through ``torch._dynamo``), they hold the default group itself, so
    ``destroy_process_group()`` leaves it alive, gloo threads included, until the interpreter
    exits and tears it down (an exit that can abort: "terminate called without an active
    exception"). This puts back the default they get when imported before
    ``init_process_group``: None, which every ``torch.distributed`` call reads as the default
    group, so calls keep their meaning. Looks at the functions and class methods of the loaded
    ``torch.distributed.*`` modules; returns how many it changed. Every driver's close calls it.
    """
    torch: Any = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 0
    world = dist.group.WORLD
    changed = 0
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("torch.distributed."):
            continue
        # only type() checks on the module's values: some of them warn on attribute access
        for value in list(vars(module).values()):
            if type(value) is types.FunctionType:
                changed += _drop_default(value, world)
            elif type(value) is type and value.__module__ == name:  # its methods' defaults
                for member in list(vars(value).values()):
                    if type(member) is types.FunctionType:
                        changed += _drop_default(member, world)
    if changed:
        _log.debug("released %d default-argument references to the default group", changed)
    return changed


def _drop_default(function: types.FunctionType, world: object) -> bool:
    """Replace ``world`` by None in ``function``'s defaults; whether there was one."""
    defaults = function.__defaults__
    keyword = function.__kwdefaults__
    found = False
    if defaults and any(d is world for d in defaults):
        function.__defaults__ = tuple(None if d is world else d for d in defaults)
        found = True
    if keyword and any(d is world for d in keyword.values()):
        function.__kwdefaults__ = {k: None if d is world else d for k, d in keyword.items()}
        found = True
    return found
