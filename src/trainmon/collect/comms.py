"""Per-collective counts, sizes, latency and bandwidth: DeepSpeed's ``comms_logger``, done properly.

:class:`CommsLogger` wraps the collectives on ``torch.distributed`` (and on
``distributed_c10d``, where torch's own helpers look them up). The training thread pays two
clock reads, a size read and one ``list.append`` per call; device events are turned into
milliseconds, aggregated and printed later on the monitor's background thread (through
:class:`~trainmon.core.values.Deferred` values). Nothing synchronises the device on the caller: CPU
calls are timed around the call or by a done-callback on the work's future, CUDA calls with
timing events read in the background. Calls are held until
:meth:`CommsLogger.take_step_comm_ms` hands them over, so call it once per step (the engine
does). What differs from DeepSpeed and what is not covered is in the README ("Many ranks").
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainmon.collect.comm_stats import (
    MESSAGE_PARAM,
    SUPPORTED_OPS,
    Accumulator,
    OpStats,
    bandwidth_gbps,
    convert_size,
    gbps,
    summary_table,
    volume_factors,
)
from trainmon.collect.comm_timing import (
    CommRecord,
    DeviceTiming,
    HostAsyncTiming,
    StepBatch,
    StepCommMs,
    is_ready,
    latency_of,
)
from trainmon.config import CommsLoggerConfig
from trainmon.core.activity import COLLECTIVES
from trainmon.core.cross_rank import MONITORING_CALL
from trainmon.core.values import Deferred
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

_log = get_logger("comms")

__all__ = [
    "STEP_FIELDS",
    "SUPPORTED_OPS",
    "CommsLogger",
    "OpStats",
    "bandwidth_gbps",
    "convert_size",
    "volume_factors",
]

STEP_FIELDS = ("count", "bytes", "latency_ms", "busbw_gbps")
"""Per-step metrics, ``comm/<op>/<field>``, enqueued by :meth:`CommsLogger.take_step_comm_ms`."""


class _StepOpMetric(Deferred):
    """One ``comm/<op>/<field>`` value of a step; resolving it also folds the step into the
    run's statistics, so that aggregation runs on the background thread."""

    __slots__ = ("_batch", "_index", "_logger", "_op")

    def __init__(self, logger: CommsLogger, batch: StepBatch, op: str, index: int) -> None:
        self._logger = logger
        self._batch = batch
        self._op = op
        self._index = index

    def resolve(self) -> float | int | None:
        row = self._batch.summary().get(self._op)
        self._logger._fold_batches()
        return None if row is None else row[self._index]


class _CallState(threading.local):
    """Per-thread re-entrancy flag: a wrapped op that reaches another wrapped op (a tensor
    subclass's ``__torch_function__`` dispatching back to it) is recorded once, as the outer."""

    busy = False


# ---- the logger -------------------------------------------------------------------------------


class CommsLogger:
    """Times ``torch.distributed`` collectives for ``perf/comm_ms`` and DeepSpeed's comms summary.

    ``record_stats`` (the engine passes ``comms_logger.enabled``) keeps per-op statistics and
    emits ``comm/<op>/{count,bytes,latency_ms,busbw_gbps}`` each step; without it, or with
    ``config.enabled`` false, collectives are only timed for :meth:`take_step_comm_ms`.
    Call :meth:`install`, :meth:`take_step_comm_ms`, :meth:`stats` and :meth:`log_summary` from
    the training thread.
    """

    def __init__(
        self, config: CommsLoggerConfig, monitor: MonitorHandle, record_stats: bool = True
    ) -> None:
        self.config = config
        self._monitor = monitor
        self._recording = bool(record_stats and config.enabled)
        logs = monitor.place.rank == monitor.log_rank
        self._verbose = self._recording and config.verbose and logs
        self._logs_summary = logs
        self._installed = False
        self._patched: list[tuple[ModuleType, str, Any, Any]] = []
        self._records: list[CommRecord] = []
        self._has_timings = False  # some record in _records holds a Timing, not a float
        self._folded_upto = 0
        self._unfolded: deque[StepBatch] = deque()
        self._stats: dict[str, dict[int, Accumulator]] = {}
        self._lock = threading.Lock()
        self._state = _CallState()
        self._group_sizes: dict[Any, int] = {}
        self._group_labels: dict[Any, str] = {}  # for the hang diagnosis (core.activity)
        self._metric_names: dict[str, tuple[str, ...]] = {}
        self._record_errors = 0
        self._host_watcher: Callable[[float], None] | None = None
        self._lean_ms = 0.0  # blocking host calls' milliseconds this step, kept without records
        self._ops = self._selected_ops()

    def _selected_ops(self) -> tuple[str, ...]:
        if not self._recording or self.config.prof_all:
            return SUPPORTED_OPS
        unknown = [op for op in self.config.prof_ops if op not in MESSAGE_PARAM]
        if unknown:
            _log.warning(
                "comms_logger.prof_ops: %s not recorded; expected names among %s",
                ", ".join(repr(op) for op in unknown),
                ", ".join(SUPPORTED_OPS),
            )
        return tuple(op for op in SUPPORTED_OPS if op in self.config.prof_ops)

    # ---- installing ----------------------------------------------------------------------

    @property
    def installed(self) -> bool:
        """True while the wrappers are in place."""
        return self._installed

    def install(self) -> None:
        """Wrap the selected collectives on ``torch.distributed``; a second call does nothing."""
        if self._installed:
            return
        import torch.distributed as dist

        if not dist.is_available():
            _log.warning("torch.distributed is not available in this torch build; nothing timed")
            return
        from torch.distributed import distributed_c10d

        wrappers: dict[int, Any] = {}  # id(original) -> its wrapper, shared by both modules
        for op in self._ops:
            for module in (dist, distributed_c10d):
                original = getattr(module, op, None)
                if original is None:
                    continue
                wrapper = wrappers.get(id(original))
                if wrapper is None:
                    wrapper = wrappers[id(original)] = self._wrap(op, original)
                self._patched.append((module, op, original, wrapper))
                setattr(module, op, wrapper)
        self._installed = True

    def uninstall(self) -> None:
        """Put the original functions back; a second call does nothing.

        A function someone replaced again after :meth:`install` is left as it is (its inner
        wrapper from here then passes calls straight through).
        """
        if not self._installed:
            return
        self._installed = False
        for module, op, original, wrapper in reversed(self._patched):
            if getattr(module, op, None) is wrapper:
                setattr(module, op, original)
            else:
                _log.warning(
                    "%s.%s was replaced after the comms logger wrapped it; left as it is",
                    module.__name__,
                    op,
                )
        self._patched.clear()
        self._group_sizes.clear()
        self._group_labels.clear()

    def _wrap(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """A function that times ``original`` and appends one record: the hot path."""
        params = list(inspect.signature(original).parameters)
        tensor_key = MESSAGE_PARAM[op] or ""
        tensor_pos = params.index(tensor_key) if tensor_key in params else -1
        group_pos = params.index("group") if "group" in params else -1
        async_pos = params.index("async_op") if "async_op" in params else -1
        state = self._state
        clock = time.perf_counter
        group_sizes = self._group_sizes
        group_labels = self._group_labels
        activity = COLLECTIVES
        want_caller = self._verbose and self.config.debug
        lean = not self._recording  # the breakdown alone: a step's total, no record per call
        logger = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if state.busy or not logger._installed or MONITORING_CALL.active:
                return original(*args, **kwargs)
            nargs = len(args)
            if tensor_pos < 0:
                tensor = None
            elif nargs > tensor_pos:
                tensor = args[tensor_pos]
            else:
                tensor = kwargs.get(tensor_key)
            first = tensor[0] if type(tensor) is list and tensor else tensor
            group = args[group_pos] if 0 <= group_pos < nargs else kwargs.get("group")
            async_op = args[async_pos] if 0 <= async_pos < nargs else kwargs.get("async_op")
            if getattr(first, "is_cuda", False):
                return logger._call_on_device(op, original, args, kwargs, tensor, group, async_op)
            label = group_labels.get(group)
            activity.enter(op, logger._group_label(group) if label is None else label)
            state.busy = True
            try:
                start = clock()
                result = original(*args, **kwargs)
                latency: Any = (clock() - start) * 1e3
            finally:
                state.busy = False
                activity.leave()
            try:
                if async_op and result is not None:
                    latency = logger._time_async_on_host(result, start, latency)
                else:
                    watcher = logger._host_watcher
                    if watcher is not None:
                        watcher(latency)
                    if lean:
                        logger._lean_ms += latency
                        return result
                n = group_sizes.get(group)
                if n is None:
                    n = logger._group_size(group)
                if tensor is None:
                    nbytes = 0
                elif type(tensor) is list:
                    nbytes = sum(t.nbytes for t in tensor)
                else:
                    nbytes = tensor.nbytes
                caller = sys._getframe(1).f_code.co_name if want_caller else None
                logger._records.append((op, nbytes, n, latency, caller))
            except Exception:
                logger._record_failed(op)
            return result

        return timed

    def _time_async_on_host(self, work: Any, start: float, enqueue_ms: float) -> Any:
        """A timing that ends when the async work completes; the enqueue time without a future."""
        timing = HostAsyncTiming(start)
        try:
            work.get_future().add_done_callback(timing.done)
        except (RuntimeError, AttributeError):
            return enqueue_ms  # e.g. gloo's point-to-point Work: "getFuture not implemented"
        self._has_timings = True
        return timing

    def _call_on_device(
        self,
        op: str,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tensor: Any,
        group: Any,
        async_op: Any,
    ) -> Any:
        """CUDA: timing events on the current stream around the call; no host synchronisation.

        A blocking call leaves the current stream waiting for the collective, so the end event
        recorded after it completes after the collective; for ``async_op=True`` the end event
        is recorded from the work's future done-callback instead.
        """
        import torch

        first = tensor[0] if type(tensor) is list else tensor
        device = first.device
        stream = torch.cuda.current_stream(device)
        event: Any = torch.cuda.Event
        start, end = event(enable_timing=True), event(enable_timing=True)
        state = self._state
        label = self._group_labels.get(group)
        COLLECTIVES.enter(op, self._group_label(group) if label is None else label)
        state.busy = True
        try:
            start.record(stream)
            result = original(*args, **kwargs)
        finally:
            state.busy = False
            COLLECTIVES.leave()
        try:
            timing = DeviceTiming(start, end, device, recorded=False)
            if async_op and result is not None:
                try:
                    result.get_future().add_done_callback(timing.done)
                except (RuntimeError, AttributeError):
                    timing.done(None)  # no future: the end event then marks the enqueue only
            else:
                end.record(stream)
                timing.recorded = True
            n = self._group_sizes.get(group)
            if n is None:
                n = self._group_size(group)
            nbytes = sum(t.nbytes for t in tensor) if type(tensor) is list else tensor.nbytes
            debug = self._verbose and self.config.debug
            caller = sys._getframe(2).f_code.co_name if debug else None
            self._records.append((op, int(nbytes), n, timing, caller))
            self._has_timings = True
        except Exception:
            self._record_failed(op)
        return result

    def _group_size(self, group: Any) -> int:
        import torch.distributed as dist

        n = dist.get_world_size(group) if group is not None else dist.get_world_size()
        n = max(1, int(n))  # -1: this rank is not in the group
        self._group_sizes[group] = n
        return n

    def _group_label(self, group: Any) -> str:
        """``"world"`` or ``"ranks 0,2"``: how the hang diagnosis names a process group."""
        import torch.distributed as dist

        label = "world"
        if group is not None and group is not getattr(dist.group, "WORLD", None):
            try:
                ranks = list(dist.get_process_group_ranks(group))
                label = "ranks " + (
                    ",".join(map(str, ranks))
                    if len(ranks) <= 8
                    else f"{ranks[0]},{ranks[1]}..{ranks[-1]} ({len(ranks)})"
                )
            except Exception:
                label = f"group {getattr(group, 'group_name', id(group))}"
        self._group_labels[group] = label
        return label

    def _record_failed(self, op: str) -> None:
        self._record_errors += 1
        if self._record_errors == 1:
            _log.warning(
                "could not record a %s call; the call itself went through", op, exc_info=True
            )

    # ---- per step ------------------------------------------------------------------------

    def watch_host_comm(self, watcher: Callable[[float], None] | None) -> None:
        """Call ``watcher(ms)`` on the calling thread after each blocking collective timed on
        the host (None: stop). The step's phase clock takes that time out of the phase that ran
        the collective, so it counts in ``perf/comm_ms`` only."""
        self._host_watcher = watcher

    def take_step_comm_ms(self) -> float | Deferred:
        """Milliseconds spent in collectives since the previous call (for ``perf/comm_ms``).

        A float when every call was timed on the host; a :class:`~trainmon.core.values.Deferred`
        (resolved by the monitor's background thread) when some are device events or async
        completions. With statistics on, also enqueues this step's ``comm/<op>/...`` metrics.
        """
        records = self._records
        lean_ms, self._lean_ms = self._lean_ms, 0.0
        if not records:
            return lean_ms
        self._records = []
        fold_from, self._folded_upto = self._folded_upto, 0
        has_timings, self._has_timings = self._has_timings, False
        batch = StepBatch(records, fold_from)
        if self._recording:
            self._unfolded.append(batch)
            items: list[tuple[str, Deferred]] = []
            for op in sorted({record[0] for record in records}):
                names = self._metric_names.get(op)
                if names is None:
                    names = self._metric_names[op] = tuple(f"comm/{op}/{f}" for f in STEP_FIELDS)
                items.extend(
                    (name, _StepOpMetric(self, batch, op, index))
                    for index, name in enumerate(names)
                )
            self._monitor.emit_checked(tuple(items), resolve=True)
        if has_timings:
            return StepCommMs(batch, lean_ms)
        total: float = sum(record[3] for record in records)
        return total + lean_ms

    # ---- aggregation (background thread, or an explicit stats()/log_summary()) -------------

    def _fold_batches(self) -> None:
        """Add every step handed over so far to the run's statistics (once each)."""
        with self._lock:
            while self._unfolded:
                batch = self._unfolded[0]
                self._fold(batch.records, batch.latencies(), batch.fold_from)
                self._unfolded.popleft()

    def _fold(self, records: list[CommRecord], latencies: list[float | None], start: int) -> None:
        """Add ``records[start:len(latencies)]`` to the statistics (caller holds the lock)."""
        rank = self._monitor.place.rank
        for index in range(start, len(latencies)):
            op, nbytes, n, _, caller = records[index]
            latency = latencies[index]
            if latency is None:
                continue
            alg, bus = volume_factors(op, n)
            by_size = self._stats.get(op)
            if by_size is None:
                by_size = self._stats[op] = {}
            acc = by_size.get(nbytes)
            if acc is None:
                acc = by_size[nbytes] = Accumulator()
            acc.add(nbytes, latency, alg, bus)
            if self._verbose:
                name = op if caller is None else f"{op} | [Caller Func: {caller}]"
                algbw, busbw = gbps(nbytes * alg, latency), gbps(nbytes * bus, latency)
                _log.info(
                    "rank=%d | comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f "
                    "| busbw (Gbps): %.2f",
                    rank,
                    name,
                    latency,
                    convert_size(nbytes),
                    algbw,
                    busbw,
                )

    def stats(self) -> dict[str, dict[int, OpStats]]:
        """op -> message size in bytes -> :class:`OpStats`, for every call recorded so far.

        Calls of the current step are included up to the first async or device call that has
        not finished yet (it is counted by a later call); earlier steps' device timings are
        waited for here. Meant for the end of a run or an epoch, not for every step.
        """
        if not self._recording:
            return {}
        self._fold_batches()
        with self._lock:
            records = self._records
            done = self._folded_upto
            latencies: list[float | None] = [None] * done
            while done < len(records) and is_ready(records[done][3]):
                latencies.append(latency_of(records[done][3]))
                done += 1
            self._fold(records, latencies, self._folded_upto)
            self._folded_upto = done
            return {
                op: {size: acc.snapshot() for size, acc in sorted(by_size.items())}
                for op, by_size in self._stats.items()
            }

    def log_summary(self) -> str:
        """DeepSpeed's ``log_summary`` table of :meth:`stats`; logged on the logging rank only."""
        stats = self.stats()
        table = summary_table(stats)
        if self._logs_summary and stats:  # nothing recorded: nothing to say
            _log.info("communication summary (rank %d):\n%s", self._monitor.place.rank, table)
        return table

    def __repr__(self) -> str:
        state = "installed" if self._installed else "not installed"
        return f"<CommsLogger {state} ops={len(self._ops)} recording={self._recording}>"
