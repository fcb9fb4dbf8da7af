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
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from trainmon.config import CommsLoggerConfig
from trainmon.core.activity import COLLECTIVES
from trainmon.core.cross_rank import MONITORING_CALL
from trainmon.core.values import Deferred
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

_log = get_logger("comms")

# Collective -> the parameter whose bytes are the "message size" (None: no tensor, e.g. barrier).
_MESSAGE_PARAM: dict[str, str | None] = {
    "all_reduce": "tensor",
    "all_gather": "tensor",  # this rank's shard (tensor_list holds n of them)
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "output",  # this rank's shard (input_list holds n of them)
    "reduce_scatter_tensor": "output",
    "all_to_all_single": "input",
    "all_to_all": "input_tensor_list",
    "broadcast": "tensor",
    "reduce": "tensor",
    "gather": "tensor",
    "scatter": "tensor",
    "send": "tensor",
    "recv": "tensor",
    "barrier": None,
}
SUPPORTED_OPS: tuple[str, ...] = tuple(_MESSAGE_PARAM)
"""The ``torch.distributed`` functions :meth:`CommsLogger.install` wraps (``prof_ops`` names)."""

STEP_FIELDS = ("count", "bytes", "latency_ms", "busbw_gbps")
"""Per-step metrics, ``comm/<op>/<field>``, enqueued by :meth:`CommsLogger.take_step_comm_ms`."""

_SIZE_NAMES = ("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
_COLUMNS = (
    "Comm. Op",
    "Message Size",
    "Count",
    "Total Latency(ms)",
    "Avg Latency(ms)",
    "tput_avg (Gbps)",
    "busbw_avg (Gbps)",
)
_TIMING_WAIT_S = 60.0  # longest the background thread waits for an async op to finish


# ---- bandwidth: DeepSpeed's formulas ----------------------------------------------------------


def volume_factors(op: str, group_size: int) -> tuple[float, float]:
    """Bytes counted for (algbw, busbw) per message byte, as DeepSpeed counts them.

    Kept apart from the division by time so that a run's totals can be summed per message
    byte and divided by total time once.
    """
    n = group_size
    if n < 1:
        raise ValueError(f"group size {n}: expected at least 1")
    # From DeepSpeed deepspeed/utils/comms_logging.py calc_bw_log (after NCCL's
    # nccl-tests doc/PERFORMANCE.md), with size in bytes and duration in ms:
    if op in ("all_to_all_single", "all_to_all"):
        # tput = size / duration; busbw = (size / duration) * ((n - 1) / n)
        return 1.0, (n - 1) / n
    if op in ("all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor"):
        # size *= n; tput = size / duration; busbw = (size / duration) * ((n - 1) / n)
        return float(n), n * ((n - 1) / n)
    if op == "all_reduce":
        # tput = size * 2 / duration; busbw = (size / duration) * (2 * (n - 1) / n)
        return 2.0, 2 * (n - 1) / n
    if op in ("send", "recv", "isend", "irecv", "broadcast", "reduce", "gather", "scatter"):
        # tput = size / duration; busbw = tput
        return 1.0, 1.0
    if op == "barrier":
        return 1.0, 1.0
    raise ValueError(f"collective {op!r}: no bandwidth formula; expected one of {SUPPORTED_OPS}")


def _gbps(volume_bytes: float, latency_ms: float) -> float:
    # DeepSpeed: bytes per ms, then "tput *= 8; tput /= 1e6" -> Gbit/s.
    if latency_ms <= 0.0:
        return 0.0
    return volume_bytes / latency_ms * 8 / 1e6


def bandwidth_gbps(
    op: str, size_bytes: float, latency_ms: float, group_size: int
) -> tuple[float, float]:
    """(algbw, busbw) in Gbit/s of one call, exactly as DeepSpeed's ``calc_bw_log``.

    A zero latency gives zero bandwidth instead of DeepSpeed's ZeroDivisionError.
    """
    alg, bus = volume_factors(op, group_size)
    return _gbps(size_bytes * alg, latency_ms), _gbps(size_bytes * bus, latency_ms)


def convert_size(size_bytes: int) -> str:
    """A byte count the way DeepSpeed's summary prints it: ``1024`` -> ``"1.0 KB"``."""
    if size_bytes <= 0:
        return "0B"
    i = 0  # DeepSpeed takes floor(log(size, 1024)); integer steps cannot round down a power
    while size_bytes >= 1024 ** (i + 1) and i < len(_SIZE_NAMES) - 1:
        i += 1
    return f"{round(size_bytes / 1024**i, 2)} {_SIZE_NAMES[i]}"


# ---- what one summary row holds ---------------------------------------------------------------


@dataclass(frozen=True)
class OpStats:
    """Every recorded call of one collective with one message size, on this rank."""

    count: int
    total_bytes: int
    total_latency_ms: float
    min_latency_ms: float
    max_latency_ms: float
    algbw_gbps: float
    """DeepSpeed's ``tput``: algorithm bytes over total time (its formula at the mean latency)."""
    busbw_gbps: float
    """Bus bandwidth, comparable across group sizes and with nccl-tests."""

    @property
    def avg_latency_ms(self) -> float:
        """Mean latency of one call."""
        return self.total_latency_ms / self.count if self.count else 0.0


class _Accumulator:
    """Running sums behind one :class:`OpStats` (bandwidth volumes summed, divided once)."""

    __slots__ = ("alg_bytes", "bus_bytes", "count", "latency_ms", "max_ms", "min_ms", "nbytes")

    def __init__(self) -> None:
        self.count = 0
        self.nbytes = 0
        self.latency_ms = 0.0
        self.min_ms = math.inf
        self.max_ms = 0.0
        self.alg_bytes = 0.0
        self.bus_bytes = 0.0

    def add(self, nbytes: int, latency_ms: float, alg: float, bus: float) -> None:
        self.count += 1
        self.nbytes += nbytes
        self.latency_ms += latency_ms
        self.min_ms = min(self.min_ms, latency_ms)
        self.max_ms = max(self.max_ms, latency_ms)
        self.alg_bytes += nbytes * alg
        self.bus_bytes += nbytes * bus

    def snapshot(self) -> OpStats:
        return OpStats(
            count=self.count,
            total_bytes=self.nbytes,
            total_latency_ms=self.latency_ms,
            min_latency_ms=self.min_ms if self.count else 0.0,
            max_latency_ms=self.max_ms,
            algbw_gbps=_gbps(self.alg_bytes, self.latency_ms),
            busbw_gbps=_gbps(self.bus_bytes, self.latency_ms),
        )


# ---- timings that are only known later --------------------------------------------------------


class _Timing(Protocol):
    def ready(self) -> bool: ...

    def elapsed_ms(self) -> float | None: ...


class _HostAsyncTiming:
    """An ``async_op=True`` CPU collective: the clock is read when its future completes."""

    __slots__ = ("end", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.end: float | None = None

    def done(self, future: Any) -> None:
        """Future done-callback (runs on the backend's thread, or inline if already done)."""
        self.end = time.perf_counter()

    def ready(self) -> bool:
        """True once the collective has finished (reading it will not wait)."""
        return self.end is not None

    def elapsed_ms(self) -> float | None:
        """Wait (background thread) until the collective has finished; None if it never does."""
        deadline = time.monotonic() + _TIMING_WAIT_S
        while self.end is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)
        return max(0.0, (self.end - self.start) * 1e3)


class _DeviceTiming:
    """A CUDA collective: two timing events on the stream; read in the background."""

    __slots__ = ("device", "end", "recorded", "start")

    def __init__(self, start: Any, end: Any, device: Any, recorded: bool) -> None:
        self.start = start
        self.end = end
        self.device = device
        self.recorded = recorded

    def done(self, future: Any) -> None:
        """Future done-callback: torch runs it with current streams that wait for the
        collective's kernels (``Future.then`` docs), so the end event lands after them."""
        import torch

        self.end.record(torch.cuda.current_stream(self.device))
        self.recorded = True

    def ready(self) -> bool:
        """True once the end event has been recorded and reached by the device."""
        return self.recorded and bool(self.end.query())

    def elapsed_ms(self) -> float | None:
        """Synchronise the end event (background thread only) and read the elapsed time."""
        deadline = time.monotonic() + _TIMING_WAIT_S
        while not self.recorded:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)
        self.end.synchronize()
        return max(0.0, float(self.start.elapsed_time(self.end)))


# A record: (op, message bytes, group size, latency ms or a _Timing, caller function or None).
_Record = tuple[str, int, int, Any, str | None]


def _latency(value: float | _Timing) -> float | None:
    if isinstance(value, float):
        return value
    return value.elapsed_ms()


def _ready(value: float | _Timing) -> bool:
    return isinstance(value, float) or value.ready()


class _StepBatch:
    """The collectives of one step, handed from the training thread to whoever reads them."""

    __slots__ = ("_latencies", "_lock", "_summary", "fold_from", "records")

    def __init__(self, records: list[_Record], fold_from: int) -> None:
        self.records = records
        self.fold_from = fold_from  # records before this index were folded by an early stats()
        self._latencies: list[float | None] | None = None
        self._summary: dict[str, tuple[int, int, float, float]] | None = None
        self._lock = threading.Lock()

    def latencies(self) -> list[float | None]:
        """Each record's latency in ms (None: could not be timed); resolved once."""
        with self._lock:
            if self._latencies is None:
                self._latencies = [_latency(record[3]) for record in self.records]
            return self._latencies

    def total_ms(self) -> float:
        """Time spent in collectives during the step."""
        return math.fsum(latency for latency in self.latencies() if latency is not None)

    def summary(self) -> dict[str, tuple[int, int, float, float]]:
        """op -> (count, bytes, latency ms, busbw Gbit/s) for this step."""
        latencies = self.latencies()
        with self._lock:
            if self._summary is None:
                sums: dict[str, list[float]] = {}
                for (op, nbytes, n, _, _), latency in zip(self.records, latencies, strict=True):
                    if latency is None:
                        continue
                    entry = sums.setdefault(op, [0, 0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += nbytes
                    entry[2] += latency
                    entry[3] += nbytes * volume_factors(op, n)[1]
                self._summary = {
                    op: (int(c), int(b), lat, _gbps(bus, lat))
                    for op, (c, b, lat, bus) in sums.items()
                }
            return self._summary


class _StepCommMs(Deferred):
    """``perf/comm_ms`` of a step whose timings are device events or async completions."""

    __slots__ = ("_batch",)

    def __init__(self, batch: _StepBatch) -> None:
        self._batch = batch

    def resolve(self) -> float:
        return self._batch.total_ms()


class _StepOpMetric(Deferred):
    """One ``comm/<op>/<field>`` value of a step; resolving it also folds the step into the
    run's statistics, so that aggregation runs on the background thread."""

    __slots__ = ("_batch", "_index", "_logger", "_op")

    def __init__(self, logger: CommsLogger, batch: _StepBatch, op: str, index: int) -> None:
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
        self._records: list[_Record] = []
        self._has_timings = False  # some record in _records holds a _Timing, not a float
        self._folded_upto = 0
        self._unfolded: deque[_StepBatch] = deque()
        self._stats: dict[str, dict[int, _Accumulator]] = {}
        self._lock = threading.Lock()
        self._state = _CallState()
        self._group_sizes: dict[Any, int] = {}
        self._group_labels: dict[Any, str] = {}  # for the hang diagnosis (core.activity)
        self._metric_names: dict[str, tuple[str, ...]] = {}
        self._record_errors = 0
        self._host_ms = 0.0
        self._ops = self._selected_ops()

    def _selected_ops(self) -> tuple[str, ...]:
        if not self._recording or self.config.prof_all:
            return SUPPORTED_OPS
        unknown = [op for op in self.config.prof_ops if op not in _MESSAGE_PARAM]
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
        tensor_key = _MESSAGE_PARAM[op] or ""
        tensor_pos = params.index(tensor_key) if tensor_key in params else -1
        group_pos = params.index("group") if "group" in params else -1
        async_pos = params.index("async_op") if "async_op" in params else -1
        state = self._state
        clock = time.perf_counter
        group_sizes = self._group_sizes
        group_labels = self._group_labels
        activity = COLLECTIVES
        want_caller = self._verbose and self.config.debug
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
                    logger._host_ms += latency
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
        timing = _HostAsyncTiming(start)
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
            timing = _DeviceTiming(start, end, device, recorded=False)
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

    def host_comm_ms(self) -> float:
        """Milliseconds spent so far in blocking collectives timed on the host (never reset).

        The step's phase clock takes the growth of this total out of a phase that ran a
        collective, so the time counts in ``perf/comm_ms`` only.
        """
        return self._host_ms

    def take_step_comm_ms(self) -> float | Deferred:
        """Milliseconds spent in collectives since the previous call (for ``perf/comm_ms``).

        A float when every call was timed on the host; a :class:`~trainmon.core.values.Deferred`
        (resolved by the monitor's background thread) when some are device events or async
        completions. With statistics on, also enqueues this step's ``comm/<op>/...`` metrics.
        """
        records = self._records
        if not records:
            return 0.0
        self._records = []
        fold_from, self._folded_upto = self._folded_upto, 0
        has_timings, self._has_timings = self._has_timings, False
        batch = _StepBatch(records, fold_from)
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
            return _StepCommMs(batch)
        total: float = sum(record[3] for record in records)
        return total

    # ---- aggregation (background thread, or an explicit stats()/log_summary()) -------------

    def _fold_batches(self) -> None:
        """Add every step handed over so far to the run's statistics (once each)."""
        with self._lock:
            while self._unfolded:
                batch = self._unfolded[0]
                self._fold(batch.records, batch.latencies(), batch.fold_from)
                self._unfolded.popleft()

    def _fold(self, records: list[_Record], latencies: list[float | None], start: int) -> None:
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
                acc = by_size[nbytes] = _Accumulator()
            acc.add(nbytes, latency, alg, bus)
            if self._verbose:
                name = op if caller is None else f"{op} | [Caller Func: {caller}]"
                algbw, busbw = _gbps(nbytes * alg, latency), _gbps(nbytes * bus, latency)
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
            while done < len(records) and _ready(records[done][3]):
                latencies.append(_latency(records[done][3]))
                done += 1
            self._fold(records, latencies, self._folded_upto)
            self._folded_upto = done
            return {
                op: {size: acc.snapshot() for size, acc in sorted(by_size.items())}
                for op, by_size in self._stats.items()
            }

    def log_summary(self) -> str:
        """DeepSpeed's ``log_summary`` table of :meth:`stats`; logged on the logging rank only."""
        width = 20
        lines = ["".join(f"{column: <{width}}" for column in _COLUMNS).rstrip()]
        for op, by_size in self.stats().items():
            lines.append(op)
            for size, row in by_size.items():
                lines.append(
                    f"{' ': <{width}}{convert_size(size): <{width}}{row.count: <{width}}"
                    f"{row.total_latency_ms: <{width}.2f}{row.avg_latency_ms: <{width}.2f}"
                    f"{row.algbw_gbps: <{width}.2f}{row.busbw_gbps: <{width}.2f}".rstrip()
                )
        table = "\n".join(lines)
        if self._logs_summary and len(lines) > 1:  # nothing recorded: nothing to say
            _log.info("communication summary (rank %d):\n%s", self._monitor.place.rank, table)
        return table

    def __repr__(self) -> str:
        state = "installed" if self._installed else "not installed"
        return f"<CommsLogger {state} ops={len(self._ops)} recording={self._recording}>"
