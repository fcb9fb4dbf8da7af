"""The stall watchdog: notices a training loop that stopped stepping, and shows where it is.

It runs on its own daemon thread on **every** rank (a hang can be on any of them). Progress is
read, never reported: every ``poll_s`` the watchdog looks at two counters the training thread
updates anyway — ``monitor.step`` and the number of events queued (any ``write_events``,
``log``, timer or engine step) — so the training loop pays nothing for being watched. Once
``monitor.step`` has advanced twice (the engine and the usual loop set it every step), only a
new ``monitor.step`` counts as a completed step, so a thread that keeps logging cannot hide a
stuck training thread; a loop that never sets it (``log(..., step=s)`` only) progresses with
each logging call. The watchdog arms at the first step it sees: the time before it (start-up,
data loading, compilation) is not a stall.

A ``stall`` rule fires when no step came for ``seconds``, or for ``multiple`` times the median
of the recent step intervals (once 5 of them were seen; intervals are measured at the
watchdog's polling resolution), or — with both — for the longer of the two. Then, once per
stall, it writes the stack of every thread to ``<run folder>/stacks-rank<r>-<time>.txt``
(the run folder is the JSONL writer's folder when that writer is enabled, else TensorBoard's,
else the CSV writer's, else the current directory): first with :mod:`faulthandler`, which
needs nothing from the stuck thread and so works while it sits in a C call or a collective,
then with thread names and source lines. The ``stall`` alert names that file in its message
and in ``details["stack_file"]``; it is repeated after ``cooldown_s`` and ``resolved`` when
steps resume. Ranks that write deliver the alert and the metric ``alerts/<name>``; the other
ranks write the stack file and log one warning with its path.

With the stacks, every rank writes ``hang-rank<r>.json`` (its last step, the last collective it
entered and whether it left it, its training thread's innermost frames; see
:mod:`trainmon.alerts.hang`). The rank that delivers the alert waits a few seconds for the other
ranks' records and puts the merged one-line verdict in the alert's message and in
``details["verdict"]``; ``trainmon hang RUN`` prints the same verdict with each rank's detail.

Nodes need not share a folder: under torchrun every rank also puts its record (and, cheaply, its
last step) in the job's own store (:mod:`trainmon.alerts.hang_store`), and the merging rank
copies the records of ranks it cannot see on disk into its run folder (``"via": "store"``),
while merging and then every few seconds of the stall, all on the watchdog thread. Every few
seconds of the stall it also refreshes the copies' ``last_seen`` from the ranks' states in the
store, and its own record's, so a rank whose node or agent stopped shows as gone (its
``last_seen`` falls behind) in the verdict and in ``trainmon hang``, even after the job ended.
Those reads take the states of the ranks it holds a copy of, and a record only when it is
missing from the folder or its rank's state names a newer one
(:meth:`~trainmon.alerts.hang_store.HangStore.sync`). A rank's state goes to the store at once
when its stall fires and when it resolves, every 5 s while stalled, and at most every 30 s
while steps come (:data:`~trainmon.alerts.hang_store.STEADY_STATE_S`).
"""

from __future__ import annotations

import faulthandler
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainmon.alerts.hang import HangVerdict, build_record, diagnose, read_records, write_record
from trainmon.alerts.hang_store import HangStore
from trainmon.alerts.rules import AlertTracker, Verdict
from trainmon.config import AlertRuleConfig
from trainmon.core.activity import COLLECTIVES, CollectiveActivity
from trainmon.core.alert import Alert
from trainmon.logging import get_logger

__all__ = ["MIN_INTERVALS", "StallWatchdog", "dump_stacks", "stack_file_path"]

_log = get_logger("alerts.watchdog")

MIN_INTERVALS = 5
"""Step intervals needed before a ``multiple`` limit applies."""
_KEPT_INTERVALS = 50
_UNKNOWN_LIMIT_POLL_S = 0.05
_STORE_SYNC_S = 5.0
"""While stalled, the merging rank looks in the job's store for missing records this often."""


def _seconds(value: float) -> str:
    """312 s, 4.25 s, 0.103 s: whole seconds from 100 up, else 3 significant digits."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def stack_file_path(folder: Path, rank: int, when: float | None = None) -> Path:
    """``<folder>/stacks-rank<r>-<YYYYmmdd-HHMMSS>.txt``, made unique with ``-2``, ``-3``..."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    path = folder / f"stacks-rank{rank}-{stamp}.txt"
    number = 2
    while path.exists():
        path = folder / f"stacks-rank{rank}-{stamp}-{number}.txt"
        number += 1
    return path


def dump_stacks(path: Path, header: str) -> Path:
    """Write every thread's stack to ``path``: faulthandler's dump (safe while a thread is
    stuck in C), then each thread's name and its Python stack with source lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:  # append: faulthandler writes to the fd
        f.write(f"{header}\n\n== every thread, most recent call first (faulthandler) ==\n")
        f.flush()
        faulthandler.dump_traceback(f, all_threads=True)
        f.write("\n== thread names ==\n")
        names = {}
        for thread in threading.enumerate():
            if thread.ident is not None:
                names[thread.ident] = thread.name
                daemon = " (daemon)" if thread.daemon else ""
                f.write(f"0x{thread.ident:016x} {thread.name}{daemon}\n")
        f.write("\n== Python stacks, most recent call last ==\n")
        for ident, frame in sys._current_frames().items():
            f.write(f"\nThread 0x{ident:016x} {names.get(ident, '?')}:\n")
            f.write("".join(traceback.format_stack(frame)))
    return path


class _StallRule:
    """One ``stall`` rule and its alert state."""

    __slots__ = ("rule", "tracker")

    def __init__(self, rule: AlertRuleConfig, tracker: AlertTracker) -> None:
        self.rule = rule
        self.tracker = tracker


class StallWatchdog:
    """Watches ``progress()`` from a daemon thread and raises ``stall`` alerts (module doc).

    ``progress`` returns ``(step, events)`` read from the training thread's counters;
    ``send(alert, rule)`` routes alerts; ``write_metric(name, value, step)`` (ranks that write)
    records ``alerts/<name>``. ``clock`` and ``poll_s`` are for tests.
    """

    def __init__(
        self,
        rules: Sequence[AlertRuleConfig],
        *,
        progress: Callable[[], tuple[int, int]],
        stack_dir: Path,
        send: Callable[[Alert, AlertRuleConfig], None],
        delivers: bool = True,
        write_metric: Callable[[str, float, int], None] | None = None,
        job: str = "",
        rank: int = 0,
        world_size: int = 1,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float | None = None,
        collectives: CollectiveActivity = COLLECTIVES,
        store: HangStore | None = None,
    ) -> None:
        self.rules = [
            _StallRule(rule, AlertTracker(rule, job=job, rank=rank, clock=clock)) for rule in rules
        ]
        self.stack_dir = stack_dir
        self.rank = rank
        self.delivers = delivers
        self.stack_file: Path | None = None
        """The stack file of the current stall (None while steps come)."""
        self.world_size = world_size
        self.job = job
        self.verdict: HangVerdict | None = None
        """The merged hang verdict of the current stall (ranks that deliver alerts only)."""
        self._collectives = collectives
        self._training_thread = threading.get_ident()  # built on the training thread
        self._progress_wall = time.time()
        self._progress = progress
        self._send = send
        self._write_metric = write_metric
        self._clock = clock
        self._poll_s = poll_s
        self._own_events = 0
        self._token = progress()
        self._last_step = self._token[0]
        self._step_moves = 0
        self._step_driven = False
        self._progress_at: float | None = None
        self._intervals: deque[float] = deque(maxlen=_KEPT_INTERVALS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._stalled = False
        """Whether a stall fired and steps have not resumed (its state says so in the store)."""
        self._store = store if store is not None else HangStore(job, rank)
        self._store_synced_at = -_STORE_SYNC_S
        self._via_store = False
        """Whether a record of this stall came from the store (its signs of life to refresh)."""

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"trainmon-watchdog-rank{self.rank}", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching (idempotent); a stall still firing is left as it is."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def firing(self) -> list[Alert]:
        """The stall alerts firing now."""
        return [r.tracker.active for r in self.rules if r.tracker.active is not None]

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval()):
            try:
                self.check()
            except Exception:
                if not self._failed:
                    self._failed = True
                    _log.warning("stall watchdog check failed; it keeps watching", exc_info=True)

    # ---- one look --------------------------------------------------------------------------

    def limit_s(self, rule: AlertRuleConfig) -> float | None:
        """Seconds without a step after which ``rule`` fires; None while it cannot know yet."""
        limits = [rule.seconds] if rule.seconds is not None else []
        if rule.multiple is not None and len(self._intervals) >= MIN_INTERVALS:
            limits.append(rule.multiple * statistics.median(self._intervals))
        return max(limits) if limits else None

    @property
    def median_interval_s(self) -> float | None:
        """The median of the recent step intervals, once enough were seen."""
        if len(self._intervals) < MIN_INTERVALS:
            return None
        return statistics.median(self._intervals)

    def poll_interval(self) -> float:
        """How often to look: a twentieth of the shortest limit, within 10 ms .. 1 s."""
        if self._poll_s is not None:
            return self._poll_s
        limits = [limit for r in self.rules if (limit := self.limit_s(r.rule)) is not None]
        if not limits:
            return _UNKNOWN_LIMIT_POLL_S
        return min(1.0, max(0.01, min(limits) / 20))

    def check(self) -> None:
        """Look once: note progress (resolving a stall) or fire / repeat stall alerts."""
        now = self._clock()
        step, events = self._progress()
        token = (step, events - self._own_events)
        step_moved = step != self._token[0]
        if step_moved if self._step_driven else token != self._token:
            if step_moved:
                self._step_moves += 1
                self._step_driven = self._step_moves >= 2
            advanced = step - self._token[0]
            if self._progress_at is not None:
                self._intervals.append((now - self._progress_at) / max(1, advanced))
            stalled_for = now - self._progress_at if self._progress_at is not None else 0.0
            self._token = token
            self._progress_at = now
            self._progress_wall = time.time()
            self._last_step = step
            self._resolve(step, stalled_for)
            self._store.publish_state(step, stalled=False, now=now)  # a resolved stall: at once
            return
        self._store.publish_state(step, stalled=self._stalled, now=now)
        if self._progress_at is None:
            return  # not armed before the first step
        waited = now - self._progress_at
        for stall in self.rules:
            limit = self.limit_s(stall.rule)
            if limit is not None and waited >= limit:
                self._fire(stall, waited, limit)
        if (
            self.delivers
            and self._stalled
            and self._store.usable
            and time.monotonic() - self._store_synced_at >= _STORE_SYNC_S
        ):
            self._late_records()

    def _fire(self, stall: _StallRule, waited: float, limit: float) -> None:
        first = stall.tracker.active is None
        if not self._stalled:  # once per stall, even when the stack file could not be written
            self._stalled = True
            self.stack_file = self._dump(waited)
            self._write_hang_record()
            self.verdict = self._merge_verdict(limit) if self.delivers else None
        where = (
            f"stacks of every thread in {self.stack_file}"
            if self.stack_file
            else ("the stack file could not be written")
        )
        text = (
            f"no training step on rank {self.rank} for {_seconds(waited)} s "
            f"(last step {self._last_step}, limit {_seconds(limit)} s); {where}"
        )
        if self.verdict is not None:
            text += f"; verdict: {self.verdict.line}"
        details: dict[str, Any] = {
            "seconds_since_step": waited,
            "limit_s": limit,
            "last_step": self._last_step,
            "stack_file": str(self.stack_file) if self.stack_file else None,
        }
        if self.verdict is not None:
            details["verdict"] = self.verdict.line
        median = self.median_interval_s
        if median is not None:
            details["median_step_interval_s"] = median
        alert = stall.tracker.update(
            Verdict(True, text, details), value=waited, step=self._last_step, when=time.time()
        )
        if alert is None:
            return
        if first and not self.delivers:
            _log.warning("stall alert %r %s: %s", alert.rule, alert.state, alert.message)
        if first and self._write_metric is not None:
            self._metric(stall.rule, 1.0, self._last_step)
        self._send(alert, stall.rule)

    def _resolve(self, step: int, stalled_for: float) -> None:
        self._stalled = False
        self.stack_file = None
        self.verdict = None
        self._via_store = False
        for stall in self.rules:
            if stall.tracker.active is None:
                continue
            text = (
                f"training steps resumed on rank {self.rank} at step {step} after "
                f"{_seconds(stalled_for)} s without one"
            )
            verdict = Verdict(False, text, {"stalled_s": stalled_for})
            alert = stall.tracker.update(verdict, value=stalled_for, step=step, when=time.time())
            if alert is None:
                continue
            if not self.delivers:
                _log.warning("stall alert %r %s: %s", alert.rule, alert.state, alert.message)
            if self._write_metric is not None:
                self._metric(stall.rule, 0.0, step)
            self._send(alert, stall.rule)

    def _metric(self, rule: AlertRuleConfig, value: float, step: int) -> None:
        self._own_events += 1  # our own event is not training progress
        if self._write_metric is not None:
            self._write_metric(f"alerts/{rule.name}", value, step)

    def _write_hang_record(self) -> None:
        """This rank's ``hang-rank<r>.json`` (see :mod:`trainmon.alerts.hang`); never raises."""
        try:
            record = build_record(
                rank=self.rank,
                world_size=self.world_size,
                step=self._last_step,
                stalled_since=self._progress_wall,
                collective=self._collectives.snapshot(),
                training_thread=self._training_thread,
                stack_file=self.stack_file,
                job=self.job,
            )
        except Exception as exc:
            _log.warning("could not build the hang record: %s", exc)
            return
        try:
            write_record(self.stack_dir, record)
        except Exception as exc:
            _log.warning("could not write the hang record in %s: %s", self.stack_dir, exc)
        self._store.publish_record(record, now=self._clock())  # with its stalled state

    def _run_folder(self) -> Path:
        """The folder the ranks' records are read from: with ``per_rank_output`` the ranks'
        folders sit under the job folder."""
        run = self.stack_dir
        return run.parent if run.name == f"rank-{self.rank}" else run

    def _sync_store(self, records: dict[int, dict[str, Any]], newer_than: float) -> None:
        """Bring ``records`` (this stall's, from the run folder) up to date from the job's
        store, in this rank's folder too: copy the records of ranks missing from them, and of
        ranks whose copy the store's state says was replaced; refresh the other copies'
        ``last_seen`` and ``last_state`` from their ranks' states, and this rank's own
        ``last_seen`` (now), so the run folder tells a rank whose node or agent stopped (its
        state no longer refreshed) from one that is hung (see
        :func:`~trainmon.alerts.hang.gone_ranks`). Of the ranks it holds a copy of only the
        states are read (see :meth:`~trainmon.alerts.hang_store.HangStore.sync`)."""
        self._store_synced_at = time.monotonic()
        held = {
            r: record.get("time") for r, record in records.items() if record.get("via") == "store"
        }
        wanted = [r for r in range(self.world_size) if r not in records or r in held]
        if not wanted:
            return  # every record on disk (one node, or a shared folder): nothing to copy
        fetched, states = self._store.sync(wanted, held, newer_than=newer_than)
        if not self._store.usable:
            return  # the store failed: no fresher sign of this rank than of the others
        changed = list(fetched)
        records.update(fetched)
        for rank in held.keys() - fetched.keys():
            state = states.get(rank)
            seen = state.get("time") if state is not None else None
            if isinstance(seen, int | float) and seen != records[rank].get("last_seen"):
                records[rank]["last_seen"] = seen
                records[rank]["last_state"] = state
                changed.append(rank)
        if not held and not fetched:
            return  # no rank known through the store: nothing to tell apart
        self._via_store = True
        if self.rank in records:
            records[self.rank]["last_seen"] = time.time()
            changed.append(self.rank)
        for rank in changed:
            record = records[rank]
            folder = Path(str(record["path"])).parent if record.get("path") else self.stack_dir
            try:
                record["path"] = str(
                    write_record(folder, {k: v for k, v in record.items() if k != "path"})
                )
            except Exception as exc:
                _log.warning("could not write rank %d's hang record from the store: %s", rank, exc)

    def _late_records(self) -> None:
        """During a stall: records that reached the store after the merge, the signs of life
        of the ranks known through it, and a new verdict."""
        if self.verdict is not None and not self.verdict.missing and not self._via_store:
            self._store_synced_at = time.monotonic()
            return  # every record on disk, none from another node: nothing to refresh
        newer_than = self._progress_wall - 1.0
        try:
            records = read_records(self._run_folder(), newer_than=newer_than)
            self._sync_store(records, newer_than)
            if records:
                self.verdict = diagnose(records, self.world_size)
        except Exception as exc:
            _log.warning("could not merge the ranks' hang records from the store: %s", exc)

    def _merge_verdict(self, limit: float) -> HangVerdict | None:
        """The verdict over every rank's record of this stall: waits (on this thread) up to
        ``limit`` seconds, within 2 .. 10, for the other ranks' watchdogs to write theirs."""
        deadline = time.monotonic() + min(10.0, max(2.0, limit))
        newer_than = self._progress_wall - 1.0
        run = self._run_folder()
        try:
            while True:
                records = read_records(run, newer_than=newer_than)
                if (
                    len(records) < self.world_size
                    and self._store.usable
                    and time.monotonic() - self._store_synced_at >= 0.5
                ):
                    self._sync_store(records, newer_than)
                if len(records) >= self.world_size or time.monotonic() >= deadline:
                    break
                if self._stop.wait(0.1):
                    break
            return diagnose(records, self.world_size) if records else None
        except Exception as exc:
            _log.warning("could not merge the ranks' hang records: %s", exc)
            return None

    def _dump(self, waited: float) -> Path | None:
        path = stack_file_path(self.stack_dir, self.rank)
        header = (
            f"trainmon stall watchdog: rank {self.rank}, no training step for "
            f"{waited:.1f} s (last step {self._last_step}), written at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}"
        )
        try:
            return dump_stacks(path, header)
        except Exception as exc:
            _log.warning("could not write the stack file %s: %s", path, exc)
            return None
