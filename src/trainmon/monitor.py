"""``Monitor``: the object users hold. It only checks and enqueues; the pipeline does the rest."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import FrameType, TracebackType
from typing import Any

from trainmon.aggregate import WindowAggregator, WindowStats
from trainmon.alerts.engine import AlertSystem, build_alerts
from trainmon.checkpoint import agree_on_stop
from trainmon.config import ConfigSource, TrainmonConfig, load_config
from trainmon.distributed import CrossRankReducer, ProcessPlace, discover, writes_on_rank
from trainmon.errors import TrainingStopped
from trainmon.events import StepScalars
from trainmon.logging import get_logger
from trainmon.pipeline import Item, Observer, Pipeline
from trainmon.timing import Timer
from trainmon.values import NATIVE_TYPES, check_value
from trainmon.writers import build_writers
from trainmon.writers.base import Writer, WriterGroup

_log = get_logger("monitor")
_MAX_CACHED_NAMES = 100_000


class Monitor:
    """Collects scalars from the training loop and writes them in the background.

    ``write_events`` takes DeepSpeed's ``[(name, value), ...]`` and ``[(name, value, step), ...]``;
    two-element tuples use :attr:`step`. Only rank 0 writes by default (decided once, here);
    other ranks queue nothing to any file. Values may be Python numbers, numpy scalars or
    single-element tensors on any device: tensors are read in the background, never here.

    ``all_ranks_log=True`` promises that every rank logs the same steps (``trainmon.initialize``
    does); with ``trainmon.cross_rank: "auto"`` it turns on cross-rank window statistics.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        place: ProcessPlace | None = None,
        writers: Sequence[Writer] | None = None,
        all_ranks_log: bool = False,
    ) -> None:
        self.config = load_config(config)
        self.place = place or discover()
        # alert rules, stall watchdog and sinks (config.alerts); None without rules
        self.alerts: AlertSystem | None = build_alerts(self.config, self.place)
        pipeline_config = self.config.trainmon
        if writers is None:
            writes = writes_on_rank(self.place, pipeline_config.per_rank_output)
            writers = build_writers(self.config, self.place) if writes else []
        aggregator = WindowAggregator(
            pipeline_config.window_steps or self.config.steps_per_print,
            pipeline_config.window_seconds,
        )
        reducer = _cross_rank_reducer(self.config, all_ranks_log)
        self._pipeline = Pipeline(WriterGroup(writers), pipeline_config, aggregator, reducer)
        self._step = 0
        self._names: set[str] = set()
        self._warned_none: set[str] = set()
        self._closed = False
        self.callbacks: list[Any] = []
        self._stop_reason: str | None = None
        if self.alerts is not None:
            self.alerts.start(self)
        _register(self)

    # ---- the hot path ----------------------------------------------------------------------

    @property
    def step(self) -> int:
        """The step at which ``(name, value)`` events and step-less ``log`` calls are recorded."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        if type(value) is not int:
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise TypeError(f"Monitor.step = {value!r}: expected an integer")
            value = value.__index__()
        self._step = value

    def write_events(self, events: Iterable[Item]) -> None:
        """Record ``(name, value)`` or ``(name, value, step)`` tuples; returns at once."""
        items = events if type(events) is tuple else tuple(events)
        names = self._names
        try:
            for item in items:
                if (
                    item[0] not in names
                    or type(item[1]) not in NATIVE_TYPES
                    or (len(item) != 2 and (len(item) != 3 or type(item[2]) is not int))
                ):
                    break
            else:
                if items:
                    self._pipeline.put((time.time(), self._step, items, False), len(items))
                return
        except (TypeError, IndexError, KeyError):
            pass
        checked = self._check_slowly(items)
        if checked:
            self._pipeline.put((time.time(), self._step, checked, True), len(checked))

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record a ``{name: value}`` mapping at ``step`` (default: :attr:`step`)."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"Monitor.log: expected a mapping of name to value, got {metrics!r}")
        if step is None:
            self.write_events(tuple(metrics.items()))
        else:
            self._check_step(step, "log(step=...)")
            self.write_events(tuple((name, value, step) for name, value in metrics.items()))

    def write_side_events(self, events: Iterable[Item], writer_kinds: Iterable[str]) -> None:
        """Record ``(name, value, step)`` events whose step is another x axis (DeepSpeed's
        ``global_samples``) for the writers of ``writer_kinds`` only (``"tensorboard"``,
        ``"csv"``, ...). They stay out of windows, cross-rank statistics and alert rules, which
        count training steps and expect every rank to log them. Returns at once."""
        items = events if type(events) is tuple else tuple(events)
        names = self._names
        kinds = writer_kinds if type(writer_kinds) is frozenset else frozenset(writer_kinds)
        try:
            for item in items:
                if (
                    len(item) != 3
                    or item[0] not in names
                    or type(item[1]) not in NATIVE_TYPES
                    or type(item[2]) is not int
                ):
                    break
            else:
                if items:
                    self._pipeline.put_side(time.time(), items, kinds)
                return
        except (TypeError, IndexError, KeyError):
            pass
        checked = self._check_slowly(items)
        for item in checked:
            if len(item) != 3 or item[2] is None:
                raise TypeError(
                    f"write_side_events: event {item!r} has no step; expected (name, value, step) "
                    f"with the step on the events' own axis"
                )
        if checked:
            self._pipeline.put_side(time.time(), checked, kinds)

    def timer(self, name: str) -> Timer:
        """A timer recording ``perf/<name>_ms``: ``with monitor.timer("data"):`` or a decorator."""
        return Timer(self, name)

    def _enqueue(self, items: tuple[Item, ...], resolve: bool = False) -> None:
        """Queue events built by trainmon itself (already valid) at the current step.

        ``resolve`` says some values are tensors, numpy scalars or :class:`Deferred`.
        """
        self._pipeline.put((time.time(), self._step, items, resolve), len(items))

    def emit_checked(self, items: tuple[Item, ...], resolve: bool = True) -> None:
        """For trainmon's own producers (the step instrument): queue ``(name, value)`` pairs
        that are already valid (non-empty string names; numbers, single-element tensors or
        :class:`~trainmon.values.Deferred`) at :attr:`step`, skipping the per-item checks."""
        self._pipeline.put((time.time(), self._step, items, resolve), len(items))

    # ---- checks off the fast path ----------------------------------------------------------

    def _check_slowly(self, items: Sequence[Any]) -> list[Item]:
        """Full check with messages that name the metric; drops ``None`` values with a notice."""
        kept: list[Item] = []
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise TypeError(
                    f"write_events: each event must be a (name, value) or (name, value, step) "
                    f"tuple, got {item!r}"
                )
            name = item[0]
            self._check_name(name)
            if len(item) == 3 and item[2] is not None:
                self._check_step(item[2], f"metric {name!r}")
            if not check_value(name, item[1]):
                if name not in self._warned_none:
                    self._warned_none.add(name)
                    _log.info("metric %r has no value yet (None); skipped until it has one", name)
                continue
            kept.append(item)
        return kept

    def _check_name(self, name: Any) -> None:
        if type(name) is not str:
            raise TypeError(f"metric name {name!r}: expected a non-empty string")
        if not name:
            raise ValueError(
                "metric name is empty: expected a non-empty string such as 'train/loss'"
            )
        if len(self._names) < _MAX_CACHED_NAMES:
            self._names.add(name)

    @staticmethod
    def _check_step(step: Any, where: str) -> None:
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise TypeError(f"{where}: step {step!r} is not an integer")

    # ---- callbacks and stopping ------------------------------------------------------------

    def add_callback(self, callback: Any) -> None:
        """Call ``callback``'s hooks: ``on_step_end(engine, step)`` on the training thread after
        each optimizer step (the engine calls it), ``on_window_end(stats)`` and
        ``on_alert(alert)`` on the background thread. Any of the three may be missing."""
        hooks = ("on_step_end", "on_window_end", "on_alert")
        if not any(callable(getattr(callback, hook, None)) for hook in hooks):
            raise TypeError(f"add_callback: {callback!r} has none of {', '.join(hooks)}")
        self.callbacks = [*self.callbacks, callback]
        if callable(getattr(callback, "on_window_end", None)):
            self._pipeline.add_observer(_WindowCallback(callback))

    def step_end(self, engine: Any, step: int) -> None:
        """Run the ``on_step_end`` callbacks, then raise :class:`TrainingStopped` if an alert
        asked to stop. The engine calls this after each optimizer step; a plain loop may too."""
        for callback in self.callbacks:
            hook = getattr(callback, "on_step_end", None)
            if hook is not None:
                hook(engine, step)
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
        rank's own rules, for a checkpoint saved on one rank. ``timeout`` bounds the wait for
        the writers (None: wait); when it passes, the check uses what the rules have judged so
        far and a warning says so. The engine's ``save_checkpoint`` calls it; call it
        yourself before saving anything else.
        """
        if not self._closed and not self._pipeline.flush(timeout) and not self._closed:
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
            captured["writers"] = _writer_identities(self.writers)

        if not self._pipeline.flush(then=capture):
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
        if not isinstance(state, Mapping) or state.get("format") != MONITOR_STATE_FORMAT:
            raise ValueError(
                f"Monitor.load_state_dict: expected the mapping Monitor.state_dict() returned "
                f"(with 'format': {MONITOR_STATE_FORMAT!r}), got {_short(state)}"
            )
        version = state.get("version")
        if type(version) is not int or not 1 <= version <= MONITOR_STATE_VERSION:
            raise ValueError(
                f"Monitor.load_state_dict: 'version' = {version!r}: this trainmon reads "
                f"versions 1 to {MONITOR_STATE_VERSION}; upgrade trainmon to read it"
            )
        step = state.get("step")
        if type(step) is not int or step < 0:
            raise ValueError(f"Monitor.load_state_dict: 'step' = {step!r}: expected an int >= 0")
        alerts = state.get("alerts") or {}
        writers = state.get("writers") or {}
        if not isinstance(alerts, Mapping) or not isinstance(writers, Mapping):
            raise ValueError(
                "Monitor.load_state_dict: 'alerts' and 'writers' must be mappings, got "
                f"{_short(alerts)} and {_short(writers)}"
            )
        if self._closed:
            raise ValueError(f"Monitor.load_state_dict: {self!r} is closed")
        resume_step = step + 1

        def restore() -> None:  # on the pipeline thread, after everything queued before
            if self.alerts is not None:
                self.alerts.load_state_dict(alerts, resume_step)
            for key, writer in _keyed(self.writers):
                identity = writers.get(key)
                try:
                    writer.resume(resume_step, identity if isinstance(identity, Mapping) else None)
                except Exception:
                    _log.warning(
                        "%s writer (%s) could not resume at step %d; it carries on as a new run",
                        writer.kind,
                        writer.location,
                        resume_step,
                        exc_info=True,
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
        """Events dropped on a full queue (also the ``trainmon/dropped_events`` metric)."""
        return self._pipeline.dropped

    def flush(self, timeout: float | None = None) -> bool:
        """Return once every earlier event is written and flushed by every writer."""
        return self._pipeline.flush(timeout)

    def close(self) -> None:
        """Write out everything and close the writers; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._pipeline.close()
        if self.alerts is not None:
            self.alerts.close()
        _live.discard(self)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        kinds = ",".join(w.kind for w in self.writers) or "none"
        return f"<Monitor rank={self.place.rank} writers={kinds} step={self._step}>"


MONITOR_STATE_FORMAT = "trainmon.monitor_state"
MONITOR_STATE_VERSION = 1
"""Version of :meth:`Monitor.state_dict`'s mapping; later versions only add keys."""


def _keyed(writers: Sequence[Writer]) -> list[tuple[str, Writer]]:
    """Each writer with its key in a saved state: its kind, ``kind-2`` for a second one..."""
    seen: dict[str, int] = {}
    keyed = []
    for writer in writers:
        seen[writer.kind] = seen.get(writer.kind, 0) + 1
        count = seen[writer.kind]
        keyed.append((writer.kind if count == 1 else f"{writer.kind}-{count}", writer))
    return keyed


def _writer_identities(writers: Sequence[Writer]) -> dict[str, Any]:
    identities: dict[str, Any] = {}
    for key, writer in _keyed(writers):
        try:
            identity = writer.identity()
        except Exception:
            _log.warning("%s writer: could not read its run identity", writer.kind, exc_info=True)
            continue
        if identity is not None:
            identities[key] = dict(identity)
    return identities


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _cross_rank_reducer(config: TrainmonConfig, all_ranks_log: bool) -> CrossRankReducer | None:
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
    return CrossRankReducer(config.trainmon.collective_timeout_s)


class _WindowCallback(Observer):
    """Calls a user's ``on_window_end(stats)`` from the background thread."""

    def __init__(self, callback: Any) -> None:
        self._callback = callback

    def on_window(self, window: WindowStats) -> Sequence[StepScalars]:
        self._callback.on_window_end(window)
        return ()


# ---- process exit: atexit and SIGTERM flush everything ---------------------------------------

_live: weakref.WeakSet[Monitor] = weakref.WeakSet()
_hooks_installed = False


def close_all() -> None:
    """Close every open monitor (run at interpreter exit and on SIGTERM)."""
    for monitor in list(_live):
        try:
            monitor.close()
        except Exception:
            _log.warning("closing %r failed", monitor, exc_info=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _register(monitor: Monitor) -> None:
    global _hooks_installed
    _live.add(monitor)
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(close_all)
    # Only take SIGTERM when nobody else has: a user's or a framework's handler wins.
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass
