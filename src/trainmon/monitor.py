"""``Monitor``: the object users hold. It only checks and enqueues; the pipeline does the rest."""

from __future__ import annotations

import operator
import os
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence, Sized
from types import TracebackType
from typing import TYPE_CHECKING, Any

from trainmon.alerts.engine import AlertSystem, build_alerts
from trainmon.alerts.health import NonFiniteWarning, call_time_stops, non_finite_float
from trainmon.collect.system import SystemSampler, start_sampler
from trainmon.collect.timing import Timer
from trainmon.config import ConfigSource, load_config
from trainmon.core.aggregate import WindowAggregator
from trainmon.core.call_path import plain_side_items, put_captured_call, require_side_steps
from trainmon.core.callbacks import Callback, as_callback, has_hook
from trainmon.core.cross_rank import release_default_group_references
from trainmon.core.entries import Item
from trainmon.core.event_check import EventChecker, checked_record_step
from trainmon.core.events import SPAN_KINDS, AttemptEnd, Hparams, Span, Text
from trainmon.core.monitor_state import (
    MONITOR_STATE_FORMAT,
    MONITOR_STATE_VERSION,
    agree_on_stop,
    checked_monitor_state,
    keyed_writers,
    writer_identities,
)
from trainmon.core.observer import Observer
from trainmon.core.pipeline import Pipeline
from trainmon.core.place import ProcessPlace, discover, logging_rank, writes_on_rank
from trainmon.core.records import (
    DEFAULT_BINS,
    PendingHparams,
    PendingMark,
    PendingProgress,
    PendingText,
    SpanTimer,
    check_metrics,
    check_text,
    check_total_steps,
    flatten_hparams,
    snapshot_histogram,
)
from trainmon.core.values import INT64_MAX, INT64_MIN, capture, check_step, is_tensor
from trainmon.core.writer import RUN_STATUSES, RunStatus, Writer, WriterGroup
from trainmon.errors import TrainingStopped
from trainmon.lifecycle import register, run_status, unregister, why_unwritable
from trainmon.logging import get_logger
from trainmon.monitor_parts import (
    WindowCallback,
    cross_rank_reducer,
    live_goodput,
    on_demand_profiler,
    pipeline_settings,
    with_starts,
)
from trainmon.writers import build_writers
from trainmon.writers.custom import as_writer

if TYPE_CHECKING:
    from trainmon.collect.layer_stats import LayerWatcher

_log = get_logger("monitor")
# exact types seen to be torch tensors (Tensor, Parameter, subclasses): one set lookup per value
_TENSOR_KINDS: set[type] = set()


class Monitor:
    """Collects scalars from the training loop and writes them in the background.

    ``write_events`` takes DeepSpeed's ``[(name, value), ...]`` and ``[(name, value, step), ...]``;
    two-element tuples use :attr:`step`. Only the logging rank writes (``trainmon.log_rank``,
    rank 0 by default; decided once, here); other ranks queue nothing to any file. Values may
    be Python numbers, numpy scalars or single-element tensors on any device: tensors are read
    in the background, never here.

    ``all_ranks_log=True`` promises that every rank logs the same steps (``trainmon.initialize``
    does); with ``trainmon.cross_rank: "auto"`` it turns on cross-rank window statistics.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        place: ProcessPlace | None = None,
        writers: Sequence[Writer | Any] | None = None,
        all_ranks_log: bool = False,
    ) -> None:
        self.config = load_config(config)
        self.place = with_starts(place or discover())
        #: The rank that writes and evaluates alerts (``trainmon.log_rank`` resolved).
        self.log_rank = logging_rank(self.config.trainmon.log_rank, self.place)
        # alert rules, stall watchdog and sinks (config.alerts); None without rules
        self.alerts: AlertSystem | None = build_alerts(self.config, self.place)
        pipeline_config = pipeline_settings(self.config.trainmon, getattr(self.alerts, "rules", ()))
        if writers is None:
            writes = writes_on_rank(self.place, pipeline_config.per_rank_output, self.log_rank)
            writers = build_writers(self.config, self.place) if writes else []
        else:
            writers = [as_writer(w, f"Monitor(writers=...)[{i}] is") for i, w in enumerate(writers)]
        aggregator = WindowAggregator(
            pipeline_config.window_steps or self.config.steps_per_print,
            pipeline_config.window_seconds,
        )
        reducer = self._reducer = cross_rank_reducer(self.config, all_ranks_log, self.log_rank)
        self._pipeline = Pipeline(WriterGroup(writers), pipeline_config, aggregator, reducer)
        system = self.config.system_metrics  # sys/* where someone reads them: writers or ranks
        self._sampler: SystemSampler | None = (
            start_sampler(self._pipeline.put_sampled, system.interval_s)
            if system.enabled and (writers or reducer is not None)
            else None
        )
        ref = weakref.ref(self)  # the profiler reads the step without keeping self alive
        self._profiler = on_demand_profiler(  # profiler.enabled: a signal or RUN/profile
            self.config, self.place, self.log_rank, lambda: getattr(ref(), "step", 0)
        )
        self._step = 0
        self._checker = EventChecker()
        self._names = self._checker.names  # what the fast path looks up
        self._closed = False
        # why events can no longer be written ("closed", "forked"), checked once per call
        self._unusable: str | None = None
        self._unwritable = 0
        self._warned_unusable: set[str] = set()
        self._pid = os.getpid()
        self.callbacks: list[Callback] = []
        self._step_callbacks: list[Callback] = []
        self._stop_reason: str | None = None
        # non_finite stop rules on plain floats, judged at the call (where rules evaluate)
        self._call_time_stops: dict[str, str] = {}
        if self.alerts is not None:
            self.alerts.start(self)
            if self.alerts.engine is not None:
                self._call_time_stops = call_time_stops(self.alerts.rules)
        if self.config.alerts.health_checks and writers:
            self._pipeline.add_observer(NonFiniteWarning())
        if writers and (meter := live_goodput(self.config, self.place)) is not None:
            self._pipeline.add_observer(meter)
        register(self, self._forked)

    # ---- the hot path ----------------------------------------------------------------------

    @property
    def step(self) -> int:
        """The step at which ``(name, value)`` events and step-less ``log`` calls are recorded."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
            # the one step check log(step=...) and write_events use: bool, float, sparse,
            # several-element or non-integer tensors are refused alike
            checked = check_step(value, "Monitor.step")
            value = checked if type(checked) is int else operator.index(checked)
        self._step = value
        profiler = self._profiler  # a step boundary: one flag read unless a profile was asked
        if profiler is not None and profiler.armed:
            profiler.at_step(value)

    def write_events(self, events: Iterable[Item]) -> None:
        """Record ``(name, value)`` or ``(name, value, step)`` tuples; returns at once.

        What is recorded is each value as it is at this call: the events are taken out of the
        caller's containers and tensors are captured (copied on their device, not read), so
        changing them afterwards changes nothing. Bad input raises here, naming the metric.
        """
        if self._unusable is not None:
            self._drop_unwritable(events)
            return
        items = events if type(events) is tuple else tuple(events)
        if self._call_time_stops and self._stop_reason is None:
            reason = non_finite_float(items, self._call_time_stops, self._step)
            if reason is not None:
                self.request_stop(reason)  # lands at the next step boundary
        names = self._names
        tensors: list[Any] = []
        step = None  # stays None unless an item has a step of its own
        try:
            for item in items:  # the fast path: tuples of a known name, a number, an int step
                if type(item) is not tuple:
                    break
                if len(item) == 2:
                    name, value = item
                else:  # anything but a triple with an int64 step raises or breaks
                    name, value, step = item
                    if type(step) is not int or step.bit_length() > 63:  # -2**63: checked below
                        break
                if name not in names:
                    break
                kind = type(value)
                if kind is float:
                    continue
                if kind not in _TENSOR_KINDS:  # tested before int: a tensor skips that test
                    if kind is int and INT64_MIN <= value <= INT64_MAX:
                        continue
                    if not is_tensor(value):
                        break
                    _TENSOR_KINDS.add(kind)
                tensors.append(value)  # stays in its (immutable) tuple as a placeholder
            else:  # a refused tensor raises in capture: the full check below names it
                if not tensors:
                    if items:
                        self._pipeline.put((time.time(), self._step, items, False), len(items))
                elif len(tensors) == len(items):
                    put_captured_call(self._pipeline, items, tensors, self._step, step is None)
                else:
                    entry = (time.time(), self._step, items, capture(tensors))
                    self._pipeline.put(entry, len(items))
                return
        except (TypeError, ValueError, IndexError, KeyError):
            pass
        checked, needs_resolving = self._checker.check(items)
        if checked:
            self._pipeline.put((time.time(), self._step, checked, needs_resolving), len(checked))

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record a ``{name: value}`` mapping at ``step`` (default: :attr:`step`)."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"Monitor.log: expected a mapping of name to value, got {metrics!r}")
        if step is None:
            self.write_events(tuple(metrics.items()))
        else:
            if type(step) is not int or not INT64_MIN <= step <= INT64_MAX:  # a plain int passes
                step = check_step(step, "log(step=...)")
            self.write_events(tuple((name, value, step) for name, value in metrics.items()))

    def write_side_events(self, events: Iterable[Item], writer_kinds: Iterable[str]) -> None:
        """Record ``(name, value, step)`` events whose step is another x axis (DeepSpeed's
        ``global_samples``) for the writers of ``writer_kinds`` only (``"tensorboard"``,
        ``"csv"``, ...). They stay out of windows, cross-rank statistics and alert rules, which
        count training steps and expect every rank to log them. Returns at once."""
        items = events if type(events) is tuple else tuple(events)
        kinds = writer_kinds if type(writer_kinds) is frozenset else frozenset(writer_kinds)
        if plain_side_items(items, self._names):
            if items:
                self._pipeline.put_side(time.time(), items, kinds)
            return
        require_side_steps(items)
        checked, needs_resolving = self._checker.check(items)
        if checked:
            self._pipeline.put_side(time.time(), checked, kinds, needs_resolving)

    def log_histogram(
        self, name: str, values: Any, step: int | None = None, *, bins: int = DEFAULT_BINS
    ) -> None:
        """Record the distribution of a tensor or array at ``step`` (default: :attr:`step`).

        The values are copied now (a tensor is cloned on its device, without a sync), so a later
        in-place change is not seen; the background thread bins them into ``bins`` equal-width
        buckets and writes a TensorBoard histogram, a W&B histogram and a journal record.
        """
        self._checker.check_name(name)
        at = self._step if step is None else checked_record_step(step, f"log_histogram({name!r})")
        self._pipeline.put_extra(snapshot_histogram(name, values, at, time.time(), bins))

    def log_text(self, name: str, text: str, step: int | None = None) -> None:
        """Record a piece of text (a generated sample, a note) at ``step`` (TensorBoard's text
        dashboard, a W&B table, the journal)."""
        self._checker.check_name(name)
        at = self._step if step is None else checked_record_step(step, f"log_text({name!r})")
        self._pipeline.put_extra(PendingText(Text(name, at, time.time(), check_text(name, text))))

    def log_hparams(
        self, hparams: Mapping[str, Any], metrics: Mapping[str, Any] | None = None
    ) -> None:
        """Record the run's hyper-parameters, and optionally the metrics that judge them.

        Nested mappings are flattened (``optimizer.lr``). They go to TensorBoard's hparams
        dashboard, W&B's config, MLflow's params and the journal (what ``trainmon compare`` and
        ``report`` diff between runs); ``metrics`` are also logged as scalars at :attr:`step`.
        """
        flat = flatten_hparams(hparams)
        numbers = check_metrics(metrics)
        record = Hparams(time.time(), self._step, flat, numbers)
        self._pipeline.put_extra(PendingHparams(record))
        if numbers:
            self.write_events(tuple(numbers.items()))

    def set_total_steps(self, total_steps: int) -> None:
        """Tell the console how many steps the run will take (for ``step 500/2000 (25%) ·
        elapsed 12m · ETA 36m``), e.g. ``len(loader) * epochs`` // accumulation."""
        self._pipeline.put_extra(PendingProgress(check_total_steps(total_steps)))

    def watch_layers(
        self, model: Any, optimizer: Any, *, every: int | None = None, depth: int | None = None
    ) -> LayerWatcher:
        """Log ``layers/<group>/grad_norm|weight_norm|update_ratio`` every ``every`` optimizer
        steps (default: the window), measured by hooks on ``optimizer.step``; alerts then name
        the groups that moved most. See :mod:`trainmon.collect.layer_stats`; ``.remove()``
        unhooks."""
        from trainmon.collect.layer_stats import LayerWatcher

        window = self.config.trainmon.window_steps or self.config.steps_per_print
        watcher = LayerWatcher(self, model, optimizer, every or window, depth)
        if self.alerts is not None:
            self.alerts.explain_with_layers()
        return watcher

    def span(self, kind: str) -> SpanTimer:
        """``with monitor.span("checkpoint_save"):`` times a checkpoint save (or
        ``"checkpoint_load"``, ``"eval"``) into the journal, where ``trainmon goodput`` counts
        it as that kind of badput. trainmon's engine and ``attach`` time their checkpoints
        themselves; use it around a save or evaluation of your own."""
        return SpanTimer(self.record_span, kind)

    def record_span(self, kind: str, start_time: float, end_time: float) -> None:
        """Record a span timed elsewhere (wall times, ``time.time()``); see :meth:`span`."""
        if kind not in SPAN_KINDS:
            raise ValueError(f"Monitor.span({kind!r}): expected one of {', '.join(SPAN_KINDS)}")
        if self._unusable is None:
            span = Span(kind, self._step, float(start_time), max(float(end_time), start_time))
            self._pipeline.put_mark(PendingMark(span))

    def timer(self, name: str) -> Timer:
        """A timer recording ``perf/<name>_ms``: ``with monitor.timer("data"):`` or a decorator."""
        return Timer(self, name)

    def emit_checked(self, items: tuple[Item, ...], resolve: bool = True) -> None:
        """For trainmon's own producers (timers, comms, the step instrument): queue
        ``(name, value)`` pairs that are already valid (non-empty string names; numbers,
        single-element tensors or :class:`~trainmon.core.values.Deferred`) at :attr:`step`, skipping
        the per-item checks.

        ``resolve`` says some values are tensors, numpy scalars or :class:`Deferred`. Tensors
        given here are read later, as they are then: producers pass tensors nobody changes
        afterwards (a fresh ``loss.detach()``, a norm just computed).
        """
        if self._unusable is not None:
            self._drop_unwritable(items)
            return
        if self._call_time_stops and self._stop_reason is None:
            reason = non_finite_float(items, self._call_time_stops, self._step)
            if reason is not None:
                self.request_stop(reason)
        self._pipeline.put((time.time(), self._step, items, resolve), len(items))

    def add_observer(self, observer: Observer) -> None:
        """For trainmon's own observers (the alert engine): see every aggregated window."""
        self._pipeline.add_observer(observer)

    def progress(self) -> tuple[int, int]:
        """``(step, events queued or dropped so far)``: both move only when the training thread
        does, so a watcher on another thread reads them lock-free to tell a stalled run."""
        return self._step, self._pipeline.events_seen

    # ---- callbacks and stopping ------------------------------------------------------------

    def add_callback(self, callback: Callback) -> None:
        """Call ``callback``'s hooks (see :class:`trainmon.Callback`): ``on_step_end`` on the
        training thread after each optimizer step, ``on_window_end`` and ``on_alert`` on the
        background thread. A plain object with at least one of the three methods is accepted
        too (TypeError otherwise)."""
        callback = as_callback(callback)
        self.callbacks = [*self.callbacks, callback]
        if has_hook(callback, "on_step_end"):
            self._step_callbacks = [*self._step_callbacks, callback]
        if has_hook(callback, "on_window_end"):
            self._pipeline.add_observer(WindowCallback(callback))

    def step_end(self, engine: Any, step: int) -> None:
        """Run the ``on_step_end`` callbacks, then raise :class:`TrainingStopped` if an alert
        asked to stop. The engine calls this after each optimizer step; a plain loop may too."""
        for callback in self._step_callbacks:
            callback.on_step_end(engine, step)
        self.raise_if_stopped()

    def request_stop(self, reason: str) -> None:
        """Ask the training loop to stop at its next step boundary (safe from any thread)."""
        if self._stop_reason is None:
            self._stop_reason = reason
            _log.error("stop requested: %s", reason)

    @property
    def stop_reason(self) -> str | None:
        """Why a stop was requested, or None: a flag a loop without the engine can poll."""
        return self._stop_reason

    def raise_if_stopped(self) -> None:
        """Raise :class:`TrainingStopped` when a stop was requested."""
        if self._stop_reason is not None:
            raise TrainingStopped(self._stop_reason)

    # ---- checkpoints and resume -------------------------------------------------------------

    def checkpoint_barrier(self, timeout: float | None = None, *, all_ranks: bool = False) -> None:
        """Call before saving a checkpoint: drain the pipeline, so the alert rules have judged
        every value logged so far, then raise :class:`TrainingStopped` if a stop rule fired.

        Rules run in the background, a few steps behind the training loop; this is what
        guarantees that weights a ``"action": "stop"`` rule flagged (a NaN loss) are never
        saved. Rules run on the rank that writes only: with ``all_ranks=True`` under
        torch.distributed it is a collective that every rank must call (as every rank calls
        DeepSpeed's ``save_checkpoint``), and all ranks stop together; the default checks this
        rank's own rules, for a checkpoint saved on one rank. It never waits for the writers
        (their flushes are queued); ``timeout`` bounds the wait for the rules (None: wait);
        when it passes, the check uses what the rules have judged so far and a warning says so.
        The engine's ``save_checkpoint`` calls it; call it yourself before saving anything else.
        """
        drained = self._pipeline.flush(timeout, writers=False)  # the rules, not the writers
        if not drained and not self._closed:
            _log.warning(
                "checkpoint: the pipeline did not drain within %s s; the alert rules may not "
                "have judged the last %d queued value(s) before this checkpoint",
                timeout,
                self._pipeline.pending,
            )
        reason = agree_on_stop(self._stop_reason) if all_ranks else self._stop_reason
        if reason is not None:
            self.request_stop(reason)
        self.raise_if_stopped()

    def state_dict(self) -> dict[str, Any]:
        """trainmon's part of a checkpoint, JSON-serialisable (format documented in the README,
        ``MONITOR_STATE_VERSION``): the step, the window position, the alert rules' state
        (baselines, firing alerts) and the writers' run identities (W&B and MLflow run ids).

        It drains the pipeline first, so the alert state covers every value logged before
        the call; call it at a step boundary, on every rank (each rank saves its own).
        """
        captured: dict[str, Any] = {}

        def capture() -> None:  # on the pipeline thread: the rules and writers are its own
            captured["alerts"] = self.alerts.state_dict() if self.alerts is not None else {}
            captured["writers"] = writer_identities(self.writers)

        if not self._pipeline.flush(then=capture, writers=False):
            capture()  # closed: nothing runs in the background any more
        aggregator = self._pipeline.aggregator
        return {
            "format": MONITOR_STATE_FORMAT,
            "version": MONITOR_STATE_VERSION,
            "step": self._step,
            "window": {
                "steps": aggregator.window_steps,
                "seconds": aggregator.window_seconds,
                "next_step": self._step + 1,
            },
            "alerts": captured["alerts"],
            "writers": captured["writers"],
            "rank": self.place.rank,
            "world_size": self.place.world_size,
            "time": time.time(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s mapping, before logging anything of the resumed
        run: the step goes back to the saved one, the alert rules get their baselines and
        firing alerts back, W&B and MLflow switch back to the saved runs, TensorBoard gets its
        purge marker and the journal its ``resume`` record at the next step, so each step is
        shown once and the resumed run's values win. Raises ``ValueError`` naming the key for
        a mapping that is not such a state.
        """
        step, alerts, writers = checked_monitor_state(state)
        if self._closed:
            raise ValueError(f"Monitor.load_state_dict: {self!r} is closed")
        resume_step = step + 1

        def restore() -> None:  # on the pipeline thread, after everything queued before
            if self.alerts is not None:
                self.alerts.load_state_dict(alerts, resume_step)
            saved = [writers.get(key) for key, _ in keyed_writers(self.writers)]
            self._pipeline.writers.resume(
                resume_step, [i if isinstance(i, Mapping) else None for i in saved]
            )

        self._step = step
        if not self._pipeline.flush(then=restore):
            _log.warning("Monitor.load_state_dict: the background thread is gone; not resumed")

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def writers(self) -> list[Writer]:
        """The writers this process writes to (empty on ranks that do not write)."""
        return list(self._pipeline.writers.writers)

    @property
    def enabled(self) -> bool:
        """True when this process writes anywhere (DeepSpeed's ``monitor.enabled``)."""
        return bool(self._pipeline.writers.writers)

    @property
    def dropped_events(self) -> int:
        """Values lost on the way, all counted: dropped on a full queue, missed by a writer that
        could not keep up, given up by a writer on a full disk (``trainmon/dropped_events``),
        and events logged after :meth:`close` or in a forked child (which nothing writes)."""
        return self._pipeline.dropped_total + self._unwritable

    @property
    def pending_events(self) -> int:
        """Events queued on the training thread and not yet handed to the writers: how far the
        background is behind (what a memory or throughput benchmark watches)."""
        return self._pipeline.pending

    @property
    def undelivered(self) -> dict[str, int]:
        """Where values were lost so far, and how many: ``"queue (full)"`` and one entry per
        writer that missed, gave up or (after close) still held values; empty when none were."""
        return self._pipeline.undelivered()

    def _drop_unwritable(self, events: Iterable[Any]) -> None:
        """Count (and, once per reason, say) that events came when nothing can write them."""
        count = len(events) if isinstance(events, Sized) else sum(1 for _ in events)
        self._unwritable += count
        reason = self._unusable
        if reason is None or reason in self._warned_unusable:
            return
        self._warned_unusable.add(reason)
        _log.warning("%r: %s", self, why_unwritable(reason, self._pid, self._unwritable))

    def _forked(self) -> None:
        """In a forked child: the pipeline's thread did not survive the fork."""
        if self._unusable is None:
            self._unusable = "forked"

    def flush(self, timeout: float | None = None) -> bool:
        """Return once every earlier event is written and flushed by every writer."""
        return self._pipeline.flush(timeout)

    def close(self, status: RunStatus = "success") -> None:
        """Write out everything and close the writers and alert sinks, within
        ``trainmon.close_timeout_s`` in all; one warning lists what was not delivered.
        ``status`` ("success", "failed" or "aborted") is how the run ended, recorded by the
        writers that keep one (MLflow's run status, W&B's exit code); ``with Monitor(...)``
        derives it from the exception leaving the block. Safe to call more than once."""
        if status not in RUN_STATUSES:
            raise ValueError(
                f"Monitor.close(status={status!r}): expected one of {', '.join(RUN_STATUSES)}"
            )
        if self._closed:
            return
        self._closed = True
        if self._unusable is None:
            self._unusable = "closed"
            # how this attempt ended, for `trainmon goodput` (a killed process leaves none)
            end = AttemptEnd(time.time(), self._step, status, self._stop_reason)
            self._pipeline.put_mark(PendingMark(end))
        deadline = time.monotonic() + self.config.trainmon.close_timeout_s
        if self._sampler is not None:
            self._sampler.close()
        if self._profiler is not None:
            self._profiler.close()
        lost = self._pipeline.close(deadline, status)
        if self._reducer is not None:
            # after the final gather: a gloo group left to interpreter exit could abort it
            self._reducer.close()
        # so that the caller's destroy_process_group() really frees the default group
        release_default_group_references()
        if self.alerts is not None:
            lost.update(self.alerts.close(max(0.0, deadline - time.monotonic())))
        unregister(self)
        if lost:
            _log.warning(
                "closed %r with data not delivered (within trainmon.close_timeout_s = %g s): %s",
                self,
                self.config.trainmon.close_timeout_s,
                "; ".join(
                    f"{where}: {count} {'alerts' if where.startswith('alert sink') else 'values'}"
                    for where, count in lost.items()
                ),
            )

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(run_status(exc))

    def __repr__(self) -> str:
        kinds = ",".join(w.kind for w in self.writers) or "none"
        return f"<Monitor rank={self.place.rank} writers={kinds} step={self._step}>"
