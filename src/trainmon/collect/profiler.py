"""A profile of a few steps, on demand: ``kill -USR2 <pid>`` or a file named ``profile``.

Nothing is paid while no profile is asked for: at each step boundary (``Monitor.step = s``) the
training thread reads one flag, :attr:`ProfileOnDemand.armed`. A request arms it:

* the signal (``profiler.signal``, SIGUSR2 by default) — its handler only sets a flag; the
  watcher thread turns it into a request;
* a file named ``profile`` in the run folder (``touch RUN/profile``) — the watcher thread of
  the logging rank (every ``poll_s``, 1 s) writes the request into it.

A request is ``{"id", "start_step", "steps"}`` in ``RUN/profile``; every rank's watcher reads
it, so under ``torchrun`` one trigger profiles the same steps on every rank (the start step
is set far enough ahead, from the pace of the steps, for every rank to see the file before
it gets there). At the start step the training thread starts ``torch.profiler`` (CPU, plus
CUDA where there is a GPU); ``steps`` boundaries later it stops it, and a background thread
writes the Chrome trace ``RUN/profiles/trace-rank<r>-step<s>.json.gz`` (Perfetto, TensorBoard's
profiler plugin) and logs a table of the top operators. The logging rank removes the
request file once its profile is written, so ``touch RUN/profile`` works again.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import math
import os
import shutil
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from trainmon.config import ProfilerConfig
from trainmon.logging import get_logger

__all__ = ["REQUEST_FILE", "ProfileOnDemand", "trace_path"]

_log = get_logger("profiler")

REQUEST_FILE = "profile"
"""The file in the run folder that asks for a profile (its content is the request)."""
_LEAD_S = 1.5  # how far ahead a request starts (at least 3 looks), for every rank to see it
_LEAD_LOOKS = 3
_PACE_LOOKS = 8  # the step pace: the fastest between two of the last this many looks
#: the watcher's look interval: one wake-up a second (each costs 20-110 us of CPU on a VM,
#: beside the training thread; benchmarks/bench_background.py)
POLL_S = 1.0
_TOP_OPS = 15

_live: weakref.WeakSet[ProfileOnDemand] = weakref.WeakSet()
_installed: dict[int, Any] = {}  # signal number -> the handler that was there before ours


def trace_path(run_dir: Path, rank: int, step: int) -> Path:
    """``<run_dir>/profiles/trace-rank<r>-step<s>.json.gz``, ``s`` the first profiled step
    (``Monitor.step = s`` ends step ``s``, as the engine sets it: a profile started at that
    boundary begins with step ``s + 1``)."""
    return run_dir / "profiles" / f"trace-rank{rank}-step{step}.json.gz"


def _on_signal(signum: int, frame: Any) -> None:
    """The signal handler: only sets a flag (the watcher thread does the rest)."""
    for profiler in list(_live):
        profiler.signalled = True


class ProfileOnDemand:
    """Watches for profile requests and runs ``torch.profiler`` over the requested steps.

    ``current_step`` reads the training loop's step (from the watcher thread); ``leader``:
    this rank turns a bare ``profile`` file into a request and removes it when done (the
    logging rank). :meth:`at_step` is called by the training thread while :attr:`armed`.
    """

    def __init__(
        self,
        config: ProfilerConfig,
        run_dir: Path,
        *,
        rank: int = 0,
        world_size: int = 1,
        leader: bool = True,
        current_step: Callable[[], int],
        poll_s: float = POLL_S,
    ) -> None:
        self.armed = False
        """Read by the training thread at each step: True from a request until its profile
        stopped."""
        self.signalled = False
        self.config = config
        self.run_dir = run_dir
        self.rank = rank
        self.world_size = world_size
        self.leader = leader
        self.poll_s = poll_s
        self.traces: list[Path] = []
        """Traces written so far (by the exporter threads)."""
        self._current_step = current_step
        self._request: tuple[str, int, int] | None = None  # (id, start step, steps)
        self._handled: set[str] = set()
        self._profile: Any = None
        self._profiling_thread: int | None = None
        self._started_at = 0
        self._stop_at = 0
        self._pace: deque[tuple[float, int]] = deque(maxlen=_PACE_LOOKS)
        self._exporters: list[threading.Thread] = []
        self._stop = threading.Event()
        self._warned: set[str] = set()
        _live.add(self)
        if config.signal is not None:
            self._install_signal(getattr(signal, config.signal))
        self._watcher = threading.Thread(target=self._watch, name="trainmon-profiler", daemon=True)
        self._watcher.start()

    # ---- the training thread ---------------------------------------------------------------

    def at_step(self, step: int) -> None:
        """A step boundary while armed: start or stop the profiler (training thread only)."""
        if self._profile is not None:
            if step >= self._stop_at:
                self._finish(step)
            return
        request = self._request
        if request is None or step < request[1]:
            return
        if step > request[1]:
            self._warn_once(
                "late",
                f"profile request {request[0]} asked to start at step {request[1]}; this rank "
                f"saw it at step {step} and starts there",
            )
        try:
            import torch.profiler as tp

            activities = [tp.ProfilerActivity.CPU]
            import torch

            if torch.cuda.is_available():
                activities.append(tp.ProfilerActivity.CUDA)
            profile = tp.profile(activities=activities)
            profile.start()
        except Exception as exc:
            self._warn_once("start", f"could not start torch.profiler ({exc}); request dropped")
            self._request = None
            self.armed = False
            return
        self._profile = profile
        self._profiling_thread = threading.get_ident()
        self._started_at = step
        self._stop_at = step + request[2]

    def _finish(self, step: int) -> None:
        profile, self._profile = self._profile, None
        self._request = None
        self.armed = False
        try:
            profile.stop()
        except Exception as exc:
            self._warn_once("stop", f"torch.profiler failed to stop ({exc}); no trace")
            return
        steps = step - self._started_at
        exporter = threading.Thread(
            target=self._export,
            args=(profile, self._started_at, steps),
            name="trainmon-profile-export",
            daemon=True,
        )
        self._exporters.append(exporter)
        exporter.start()

    # ---- background: export, watch ---------------------------------------------------------

    def _export(self, profile: Any, step: int, steps: int) -> None:
        path = trace_path(self.run_dir, self.rank, step + 1)  # named by its first step
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
            profile.export_chrome_trace(str(raw))
            packed = path.with_name(path.name + ".tmp")
            with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            os.replace(packed, path)
            raw.unlink()
            self.traces.append(path)
            sort_by = "self_cuda_time_total" if _has_cuda() else "self_cpu_time_total"
            table = profile.key_averages().table(sort_by=sort_by, row_limit=_TOP_OPS)
            _log.info(
                "profile of steps %d..%d on rank %d: %s\ntop operators by %s:\n%s",
                step + 1,
                step + steps,
                self.rank,
                path,
                sort_by,
                table,
            )
        except Exception as exc:
            _log.warning("could not write the profile trace %s: %s", path, exc)
        finally:
            if self.leader:
                with contextlib.suppress(OSError):
                    (self.run_dir / REQUEST_FILE).unlink()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._look()
            except Exception:
                self._warn_once("watch", "profile request check failed; it keeps watching")

    def _look(self) -> None:
        """One look: note the pace, turn a signal or a bare file into a request, read one."""
        now, step = time.monotonic(), self._current_step()
        pace = self._pace
        if pace and step < pace[-1][1]:
            pace.clear()  # the step went back (a resume)
        pace.append((now, step))
        rate = _fastest_pace(pace)
        path = self.run_dir / REQUEST_FILE
        if self.signalled:
            self.signalled = not self._write_request(path, step, rate)
        try:
            text = path.read_bytes()
        except OSError:
            return
        try:
            request = orjson.loads(text)
            ident, start, steps = str(request["id"]), int(request["start_step"]), request["steps"]
        except (ValueError, KeyError, TypeError):
            if self.leader and not text.strip():  # `touch RUN/profile`
                self._write_request(path, step, rate)
            return
        if ident in self._handled or self._request is not None or self._profile is not None:
            return
        self._handled.add(ident)
        count = int(steps) if isinstance(steps, int) and steps >= 1 else self.config.steps
        self._request = (ident, start, count)
        self.armed = True
        _log.info(
            "profile request %s: steps %d..%d on rank %d",
            ident,
            start + 1,
            start + count,
            self.rank,
        )

    def _write_request(self, path: Path, step: int, rate: float) -> bool:
        """Start ``_LEAD_S`` seconds (at least ``_LEAD_LOOKS`` looks) of steps ahead at the
        fastest recent pace, so that every rank's watcher has read the request: a pace from
        slow early steps would start it too soon. With several ranks and no pace yet (a signal
        before the second look), nothing is written and False returned: the next look knows
        the pace (a fixed guess of 20 steps was under one look at 40 steps a second)."""
        if self.world_size == 1:
            lead = 1
        elif rate == math.inf:
            return False
        else:
            ahead_s = max(_LEAD_S, _LEAD_LOOKS * self.poll_s)
            lead = max(3, math.ceil(rate * ahead_s) + 2)
        request = {
            "id": f"{time.time():.6f}-rank{self.rank}",
            "start_step": step + lead,
            "steps": self.config.steps,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_bytes(orjson.dumps(request))
        os.replace(temp, path)
        return True

    # ---- signal and lifecycle --------------------------------------------------------------

    def _install_signal(self, signum: int) -> None:
        if signum in _installed:
            return
        if threading.current_thread() is not threading.main_thread():
            _log.debug("profiler: built off the main thread: no signal trigger (the file works)")
            return
        try:
            current = signal.getsignal(signum)
            if current not in (signal.SIG_DFL, None):
                _log.info(
                    "profiler: %s already has a handler (kept); ask for a profile with "
                    "the file %s instead",
                    signal.Signals(signum).name,
                    self.run_dir / REQUEST_FILE,
                )
                return
            signal.signal(signum, _on_signal)
            _installed[signum] = current
        except (ValueError, OSError) as exc:
            self._warn_once("signal", f"could not take {signum} ({exc})")

    def close(self, timeout: float = 30.0) -> None:
        """Stop watching, stop a profile still running (its trace is written), wait for the
        traces being written (up to ``timeout`` s). Idempotent."""
        self._stop.set()
        if self._profile is not None and threading.get_ident() == self._profiling_thread:
            self._finish(self._current_step())  # the thread that started it stops it
        deadline = time.monotonic() + timeout
        for exporter in self._exporters:
            exporter.join(max(0.0, deadline - time.monotonic()))
        _live.discard(self)
        if not _live and threading.current_thread() is threading.main_thread():
            for signum, before in list(_installed.items()):
                try:
                    if signal.getsignal(signum) is _on_signal:
                        signal.signal(signum, before if before is not None else signal.SIG_DFL)
                except (ValueError, OSError):
                    pass
                del _installed[signum]

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning("profiler: %s", message)


def _fastest_pace(looks: deque[tuple[float, int]]) -> float:
    """Steps per second between the two consecutive looks (of ``(time, step)``) that saw the
    most; ``math.inf`` until two looks at least 0.1 s apart."""
    best = -1.0
    for (then, first), (now, last) in itertools.pairwise(looks):
        if now - then >= 0.1:
            best = max(best, (last - first) / (now - then))
    return best if best >= 0 else math.inf


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False
