"""``StepInstrument``: what one training step measured, fed by a driver's hook calls."""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trainmon.collect.instrument.clock import (
    BACKWARD,
    BETWEEN,
    COMM,
    DATA,
    FORWARD,
    OPTIMIZER,
    CommSource,
    PhaseClock,
    phase_clock,
)
from trainmon.collect.instrument.loss import LossAccumulator
from trainmon.collect.instrument.memory import MemoryProbe
from trainmon.collect.instrument.rates import Throughput
from trainmon.core.cross_rank import release_default_group_references
from trainmon.core.values import Deferred
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.core.contracts import MonitorHandle

_log = get_logger("instrument")
_clock = time.perf_counter


class StepInstrument:
    """Turns a driver's hook calls into each step's metrics and hands them to ``monitor``.

    A driver calls whichever hooks its framework allows; all but :meth:`step_end` are
    optional. Per step (at :meth:`step_end`) it logs, in one call:

    * ``train/loss`` (mean of the losses given to :meth:`record_loss`), ``train/lr``,
      ``train/grad_norm``, ``train/loss_scale`` when given;
    * ``perf/step_time_ms``: host time from the previous :meth:`step_end` (the first step: from
      the first other hook call; not logged for a first step that no hook started) to this
      one; ``perf/samples_per_sec`` and, with the throughput settings, ``perf/tokens_per_sec``,
      ``perf/tflops``, ``perf/mfu``;
    * with ``breakdown``: ``perf/forward_ms``, ``perf/backward_inner_ms`` (backward compute),
      ``perf/optimizer_ms``, ``perf/comm_ms`` (collectives; from the comms logger under
      torch.distributed, else the ``comm`` phase), ``perf/data_ms`` (waits inside a data
      loader the driver sees; unless ``data_wait`` is off) and ``perf/between_steps_ms`` (from
      a ``step()`` to the next forward, outside such a loader; with ``between_steps``); they
      are disjoint, so their sum is at most the step time. ``perf/backward_allreduce_ms`` (the
      ``comm`` phase, a part of ``perf/comm_ms``) when the driver marks its gradient
      all-reduce;
    * ``mem/*`` (see :class:`~trainmon.collect.instrument.memory.MemoryProbe`).

    Phases nest: a phase begun inside another pauses the outer one (an all-reduce marked
    inside ``backward`` is not backward time). Hooks only read the clock and append; nothing
    reads a tensor or synchronises a device on the training thread.

    ``samples_per_step``: this rank's samples per optimizer step (``step_end(samples=...)``
    overrides it per step). ``device``: CUDA event timing and CUDA memory on a CUDA device.
    ``breakdown`` defaults to the config's ``wall_clock_breakdown``; ``time_collectives``
    (default: when torch.distributed is initialised and the breakdown or ``comms_logger``
    is on) wraps torch.distributed's collectives for ``perf/comm_ms``. ``data_wait``: the
    driver times a data loader (:attr:`logs_data_wait`, which it may turn on later);
    ``between_steps``: the driver times the gap from its ``step()`` to the next forward. A gap
    trainmon cannot tell from user code is never logged as a data wait.
    """

    def __init__(
        self,
        monitor: MonitorHandle,
        *,
        samples_per_step: float | None = None,
        device: Any = None,
        breakdown: bool | None = None,
        time_collectives: bool | None = None,
        memory: bool = True,
        data_wait: bool = True,
        between_steps: bool = False,
    ) -> None:
        config = monitor.config
        self.monitor = monitor
        self.samples_per_step = samples_per_step
        self.breakdown = config.wall_clock_breakdown if breakdown is None else breakdown
        #: With the breakdown: log ``perf/data_ms`` (the driver sees the loader's waits).
        self.logs_data_wait = data_wait
        #: With the breakdown: log ``perf/between_steps_ms`` (the driver times that gap).
        self.logs_between_steps = between_steps
        self.comms: Any = None
        if time_collectives is None:
            time_collectives = self.breakdown or config.comms_logger.enabled
        if time_collectives and _distributed_initialised():
            self.comms = _start_comms(monitor)
        comm_source: CommSource | None = self.comms
        if comm_source is not None and not callable(getattr(comm_source, "watch_host_comm", None)):
            comm_source = None  # a stand-in that reports no collective: no subtraction
        self._clock = clock = phase_clock(device, comm_source, self.breakdown)
        self.throughput = Throughput.from_config(config.throughput, device)
        self.memory = MemoryProbe(device, config.steps_per_print) if memory else None
        self.loss = LossAccumulator()
        self.steps = 0
        self._step_start = -1.0
        self._grad_norm: Any = None
        #: ``trainmon.grad_norm_every``: the steps whose ``train/grad_norm`` is wanted
        self.grad_norm_every = config.trainmon.grad_norm_every
        self._marks_comm = False
        self._closed = False
        #: Each phase's milliseconds of the last logged step (indexed like ``PHASES``; numbers
        #: or Deferred): for a driver that also reports them in its framework's own names.
        self.last_phase_ms: list[Any] | None = None
        # The hooks are the clock's own methods bound to a phase: one call, no extra layer.
        begin, end = clock.begin, clock.end
        self.begin = begin
        self.end = end
        self.data_begin = functools.partial(begin, DATA)
        self.data_end = functools.partial(end, DATA)
        self.forward_begin = functools.partial(begin, FORWARD)
        self.forward_end = functools.partial(end, FORWARD)
        self.backward_begin = functools.partial(begin, BACKWARD)
        self.backward_end = functools.partial(end, BACKWARD)
        self.comm_end = functools.partial(end, COMM)
        self.optimizer_begin = functools.partial(begin, OPTIMIZER)
        self.optimizer_end = functools.partial(end, OPTIMIZER)
        self.between_begin = functools.partial(begin, BETWEEN)
        self.between_end = functools.partial(end, BETWEEN)
        self.record_loss = self.loss.add

    # ---- hooks (training thread) ---------------------------------------------------------
    # Each takes no argument and returns at once (a clock read and a few list operations).

    begin: Callable[[int], None]
    """Open a phase (:data:`~trainmon.collect.instrument.clock.FORWARD`, ...) now; the phase
    open until now, if any, pauses until this one ends."""
    end: Callable[[int], None]
    """Close a phase now; an end whose begin was not seen is ignored."""
    data_begin: Callable[[], None]
    """Waiting for the next batch starts."""
    data_end: Callable[[], None]
    """The batch arrived."""
    forward_begin: Callable[[], None]
    """The forward pass starts."""
    forward_end: Callable[[], None]
    """The forward pass ended."""
    backward_begin: Callable[[], None]
    """The backward pass (compute) starts."""
    backward_end: Callable[[], None]
    """The backward pass ended."""
    comm_end: Callable[[], None]
    """The communication begun by :meth:`comm_begin` ended."""
    optimizer_begin: Callable[[], None]
    """The optimizer step starts (unscale, clip, norm, step, scheduler, zero_grad)."""
    optimizer_end: Callable[[], None]
    """The optimizer step ended."""
    between_begin: Callable[[], None]
    """The driver's ``step()`` returns: what runs until the next forward is between steps
    (a data wait begun inside it pauses it)."""
    between_end: Callable[[], None]
    """The next forward starts."""
    record_loss: Callable[[Any], None]
    """One micro-batch's loss (a single-element tensor or a number); never read on the
    training thread. The tensor is kept until the background reads it: pass it detached, or
    its autograd graph lives that long (see
    :meth:`~trainmon.collect.instrument.loss.LossAccumulator.add`)."""

    def step_begin(self) -> None:
        """Mark the start of the first step (later steps run from the previous step end)."""
        if self._step_start < 0.0 and self._clock.first < 0.0:
            self._step_start = _clock()

    def restart(self) -> None:
        """Time from now on belongs to the next step: what ran since the last step end
        (evaluation, checkpointing between steps) is dropped from the step time and from the
        phases; a phase still open keeps running from now. For framework drivers."""
        now = _clock()
        self._step_start = now
        self._clock.take(now)

    def comm_begin(self) -> None:
        """The gradient all-reduce (or other communication of the step) starts; logged as
        ``perf/backward_allreduce_ms`` besides counting in ``perf/comm_ms``."""
        self._marks_comm = True
        self._clock.begin(COMM)

    def local_loss(self) -> Any:
        """The step's mean loss so far as a 0-d tensor (None without one), for a driver that
        averages it across data-parallel ranks; give the result to :meth:`replace_loss`."""
        return self.loss.local_mean()

    def replace_loss(self, value: Any) -> None:
        """Log ``value`` (e.g. the data-parallel mean loss) as this step's ``train/loss``."""
        self.loss.replace(value)

    def grad_norm_due(self, step: int) -> bool:
        """Whether step ``step``'s ``train/grad_norm`` is wanted (``trainmon.grad_norm_every``):
        a driver that computes the norm only for the metric skips it on the other steps."""
        every = self.grad_norm_every
        return every > 0 and step % every == 0

    def record_grad_norm(self, norm: Any) -> None:
        """The step's global gradient norm before clipping (a tensor or a number)."""
        self._grad_norm = norm

    def step_end(
        self,
        step: int | None = None,
        *,
        samples: float | None = None,
        tokens: float | None = None,
        lr: Any = None,
        loss_scale: Any = None,
        extras: Iterable[tuple[str, Any]] | None = None,
    ) -> int:
        """Close the step: log its metrics at ``step`` (default: one more than the last).

        ``samples``/``tokens``: this rank's work in the step (default ``samples_per_step``;
        tokens from ``throughput.tokens_per_sample``). ``lr``, ``loss_scale``: logged when
        given. ``extras``: more ``(name, value)`` pairs for the same step, checked as
        ``Monitor.write_events`` checks them. Returns the step logged.
        """
        now = _clock()
        started = self._step_start
        if started < 0.0:
            started = self._clock.first
        self._step_start = now
        step = self.steps + 1 if step is None else step
        self.steps = step
        items: list[tuple[str, Any]] = []
        add = items.append
        loss = self.loss.take()
        if loss is not None:
            add(("train/loss", loss))
        if lr is not None:
            add(("train/lr", lr))
        norm = self._grad_norm
        if norm is not None:
            self._grad_norm = None
            add(("train/grad_norm", norm))
        if started >= 0.0:  # unknown for a first step whose start no hook marked
            step_s = now - started
            add(("perf/step_time_ms", step_s * 1e3))
            if samples is None:
                samples = self.samples_per_step
            if samples is not None:
                self.throughput.add_to(items, step_s, samples, tokens)
        if loss_scale is not None:
            add(("train/loss_scale", loss_scale))
        # the comms logger holds each collective until handed over: take them every step
        comms = self.comms
        comm = None if comms is None else comms.take_step_comm_ms()
        if self.breakdown:
            ms = self._clock.take(now)
            self.last_phase_ms = ms
            data, forward, backward, comm_phase, optimizer, between = ms  # PHASES
            add(("perf/forward_ms", forward))
            add(("perf/backward_inner_ms", backward))
            add(("perf/optimizer_ms", optimizer))
            add(("perf/comm_ms", _communication_ms(comm_phase, comm, self._clock)))
            if self._marks_comm:
                add(("perf/backward_allreduce_ms", comm_phase))
            if self.logs_data_wait:
                add(("perf/data_ms", data))
            if self.logs_between_steps:
                add(("perf/between_steps_ms", between))
        memory = self.memory
        if memory is not None:
            memory.add_to(items, step)
        monitor = self.monitor
        monitor.step = step
        monitor.emit_checked(tuple(items))
        if extras is not None:
            monitor.write_events(tuple(extras))
        return step

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Log the collective summary and restore torch.distributed's functions; then let the
        caller's ``destroy_process_group()`` really free the default group (see
        :func:`~trainmon.core.cross_rank.release_default_group_references`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        comms, self.comms = self.comms, None
        try:
            if comms is not None:
                try:
                    comms.log_summary()
                finally:
                    comms.uninstall()
        finally:
            release_default_group_references()


def _distributed_initialised() -> bool:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    return dist is not None and dist.is_available() and dist.is_initialized()


def _start_comms(monitor: MonitorHandle) -> Any:
    """A collective logger timing every collective (statistics only with ``comms_logger``)."""
    config = monitor.config
    comms_module = importlib.import_module(
        "trainmon.collect.comms"
    )  # looked up late: tests swap it
    comms = comms_module.CommsLogger(
        config.comms_logger, monitor, record_stats=config.comms_logger.enabled
    )
    comms.install()
    return comms


def _communication_ms(comm_phase: Any, collectives: Any, clock: PhaseClock) -> Any:
    """All of the step's communication, the whole that ``perf/backward_allreduce_ms`` (the comm
    phase) is a part of: the comm phase's span (collectives and the bookkeeping between them,
    as in ZeRO's reduction epilogue) plus the collectives run inside other phases, and never
    less than the collectives' own total (some run while no phase is open)."""
    moved = clock.take_moved_comm_ms()
    if collectives is None:
        return comm_phase
    if moved is not None and isinstance(comm_phase, float) and isinstance(collectives, float):
        return max(collectives, comm_phase + moved)
    return _LargestOf(comm_phase, collectives)


class _LargestOf(Deferred):
    """The larger of two timings resolved in the background (device spans, async completions)."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Any, b: Any) -> None:
        self._a, self._b = a, b

    def resolve(self) -> float | None:
        values = [v.resolve() if isinstance(v, Deferred) else v for v in (self._a, self._b)]
        known = [float(v) for v in values if v is not None]
        return max(known) if known else None
