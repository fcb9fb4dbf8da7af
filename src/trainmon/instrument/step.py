"""``StepInstrument``: what one training step measured, fed by a driver's hook calls."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trainmon.instrument.clock import (
    BACKWARD,
    COMM,
    DATA,
    FORWARD,
    OPTIMIZER,
    CommSource,
    PhaseClock,
    phase_clock,
)
from trainmon.instrument.loss import LossAccumulator
from trainmon.instrument.memory import MemoryProbe
from trainmon.instrument.rates import Throughput
from trainmon.logging import get_logger

if TYPE_CHECKING:
    from trainmon.monitor import Monitor

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
      torch.distributed, else the ``comm`` phase), ``perf/data_ms``; they are disjoint, so
      their sum is at most the step time. ``perf/backward_allreduce_ms`` (the ``comm`` phase,
      a part of ``perf/comm_ms``) when the driver marks its gradient all-reduce;
    * ``mem/*`` (see :class:`~trainmon.instrument.memory.MemoryProbe`).

    Phases nest: a phase begun inside another pauses the outer one (an all-reduce marked
    inside ``backward`` is not backward time). Hooks only read the clock and append; nothing
    reads a tensor or synchronises a device on the training thread.

    ``samples_per_step``: this rank's samples per optimizer step (``step_end(samples=...)``
    overrides it per step). ``device``: CUDA event timing and CUDA memory on a CUDA device.
    ``breakdown`` defaults to the config's ``wall_clock_breakdown``; ``time_collectives``
    (default: when torch.distributed is initialised and the breakdown or ``comms_logger``
    is on) wraps torch.distributed's collectives for ``perf/comm_ms``.
    """

    def __init__(
        self,
        monitor: Monitor,
        *,
        samples_per_step: float | None = None,
        device: Any = None,
        breakdown: bool | None = None,
        time_collectives: bool | None = None,
        memory: bool = True,
    ) -> None:
        config = monitor.config
        self.monitor = monitor
        self.samples_per_step = samples_per_step
        self.breakdown = config.wall_clock_breakdown if breakdown is None else breakdown
        self.comms: Any = None
        if time_collectives is None:
            time_collectives = self.breakdown or config.comms_logger.enabled
        if time_collectives and _distributed_initialised():
            self.comms = _start_comms(monitor)
        comm_source: CommSource | None = self.comms
        if comm_source is not None and not callable(getattr(comm_source, "host_comm_ms", None)):
            comm_source = None  # a stand-in without the running total: no subtraction
        self._clock: PhaseClock | None = (
            phase_clock(device, comm_source) if self.breakdown else None
        )
        self.throughput = Throughput.from_config(config.throughput, device)
        self.memory = MemoryProbe(device, config.steps_per_print) if memory else None
        self.loss = LossAccumulator()
        self.steps = 0
        self._step_start = -1.0
        self._grad_norm: Any = None
        self._marks_comm = False
        self._closed = False
        #: Each phase's milliseconds of the last logged step (indexed like ``PHASES``; numbers
        #: or Deferred): for a driver that also reports them in its framework's own names.
        self.last_phase_ms: list[Any] | None = None

    # ---- hooks (training thread) ---------------------------------------------------------

    def begin(self, phase: int) -> None:
        """Open ``phase`` (:data:`~trainmon.instrument.clock.FORWARD`, ...) now."""
        now = _clock()
        if self._step_start < 0.0:
            self._step_start = now
        clock = self._clock
        if clock is not None:
            clock.begin(phase, now)

    def end(self, phase: int) -> None:
        """Close ``phase`` now; an end whose begin was not seen is ignored."""
        clock = self._clock
        if clock is not None:
            clock.end(phase, _clock())

    def step_begin(self) -> None:
        """Mark the start of the first step (later steps run from the previous step end)."""
        if self._step_start < 0.0:
            self._step_start = _clock()

    def data_begin(self) -> None:
        """Waiting for the next batch starts."""
        self.begin(DATA)

    def data_end(self) -> None:
        """The batch arrived."""
        self.end(DATA)

    def forward_begin(self) -> None:
        """The forward pass starts."""
        self.begin(FORWARD)

    def forward_end(self) -> None:
        """The forward pass ended."""
        self.end(FORWARD)

    def backward_begin(self) -> None:
        """The backward pass starts."""
        self.begin(BACKWARD)

    def backward_end(self) -> None:
        """The backward pass ended."""
        self.end(BACKWARD)

    def comm_begin(self) -> None:
        """The gradient all-reduce (or other communication of the step) starts."""
        self._marks_comm = True
        self.begin(COMM)

    def comm_end(self) -> None:
        """The communication ended."""
        self.end(COMM)

    def optimizer_begin(self) -> None:
        """The optimizer step starts (unscale, clip, step, scheduler, zero_grad)."""
        self.begin(OPTIMIZER)

    def optimizer_end(self) -> None:
        """The optimizer step ended."""
        self.end(OPTIMIZER)

    def record_loss(self, loss: Any) -> None:
        """One micro-batch's loss (a single-element tensor or a number); never read here."""
        self.loss.add(loss)

    def local_loss(self) -> Any:
        """The step's mean loss so far as a 0-d tensor (None without one), for a driver that
        averages it across data-parallel ranks; give the result to :meth:`replace_loss`."""
        return self.loss.local_mean()

    def replace_loss(self, value: Any) -> None:
        """Log ``value`` (e.g. the data-parallel mean loss) as this step's ``train/loss``."""
        self.loss.replace(value)

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
        self._step_start = now
        step = self.steps + 1 if step is None else step
        self.steps = step
        items: list[tuple[str, Any]] = []
        loss = self.loss.take()
        if loss is not None:
            items.append(("train/loss", loss))
        if lr is not None:
            items.append(("train/lr", lr))
        norm = self._grad_norm
        if norm is not None:
            self._grad_norm = None
            items.append(("train/grad_norm", norm))
        if started >= 0.0:  # unknown for a first step whose start no hook marked
            step_s = now - started
            items.append(("perf/step_time_ms", step_s * 1e3))
            if samples is None:
                samples = self.samples_per_step
            if samples is not None:
                self.throughput.add_to(items, step_s, samples, tokens)
        if loss_scale is not None:
            items.append(("train/loss_scale", loss_scale))
        # the comms logger holds each collective until handed over: take them every step
        comm = self.comms.take_step_comm_ms() if self.comms is not None else None
        clock = self._clock
        if clock is not None:
            ms = clock.take(now)
            self.last_phase_ms = ms
            items.append(("perf/forward_ms", ms[FORWARD]))
            items.append(("perf/backward_inner_ms", ms[BACKWARD]))
            items.append(("perf/optimizer_ms", ms[OPTIMIZER]))
            items.append(("perf/comm_ms", ms[COMM] if comm is None else comm))
            if self._marks_comm:
                items.append(("perf/backward_allreduce_ms", ms[COMM]))
            items.append(("perf/data_ms", ms[DATA]))
        if self.memory is not None:
            self.memory.add_to(items, step)
        monitor = self.monitor
        monitor.step = step
        monitor.emit_checked(tuple(items))
        if extras is not None:
            monitor.write_events(tuple(extras))
        return step

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Log the collective summary and restore torch.distributed's functions. Idempotent."""
        if self._closed:
            return
        self._closed = True
        comms, self.comms = self.comms, None
        if comms is not None:
            try:
                comms.log_summary()
            finally:
                comms.uninstall()


def _distributed_initialised() -> bool:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    return dist is not None and dist.is_available() and dist.is_initialized()


def _start_comms(monitor: Monitor) -> Any:
    """A collective logger timing every collective (statistics only with ``comms_logger``)."""
    config = monitor.config
    comms_module = importlib.import_module("trainmon.comms")  # looked up late: tests swap it
    comms = comms_module.CommsLogger(
        config.comms_logger, monitor, record_stats=config.comms_logger.enabled
    )
    comms.install()
    return comms
