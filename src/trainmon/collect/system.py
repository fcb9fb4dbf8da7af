"""System metrics, sampled by a background thread of each process: ``sys/*``.

The training thread never sees this module. Every ``interval_s`` the sampler reads the
process's CPU time, memory and disk I/O and the host's CPU and network counters with psutil,
and, where NVML is present (``pip install nvidia-ml-py``), the GPUs of this process; it hands
the values to the pipeline, which places them at the stream's current step, so they are
windowed, reduced across ranks and judged by alert rules like any metric.

A metric the machine does not have is left out, one at a time: a counter psutil cannot read
here (no ``io_counters`` on macOS), an NVML field a GPU does not support (power on some
boards) or NVML itself missing. Nothing is ever filled in with a made-up value.

Which GPUs are "of this process": under a launcher (``LOCAL_RANK`` set) the one at that index
among the visible devices (``CUDA_VISIBLE_DEVICES``, by index or UUID), else every visible
GPU. ``<i>`` in ``sys/gpu<i>/...`` counts this process's GPUs from 0, so with one GPU per rank
every rank writes ``sys/gpu0/...`` and the cross-rank statistics compare like with like.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from trainmon.logging import get_logger

__all__ = ["GPU_FIELDS", "MIB", "SystemSampler", "process_gpu_indices", "start_sampler"]

_log = get_logger("system")

MIB = 1024 * 1024
Sample = tuple[tuple[str, float], ...]


# ---- NVML: one reader per field, each named next to its code ---------------------------------


def _throttle(nvml: Any, handle: Any) -> float:
    """Clock-throttle (NVML: "clocks event") reasons as a bit mask; 0 means full clocks."""
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if read is None:
        read = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return float(read(handle))


#: ``sys/gpu<i>/<field>`` and how NVML reads it, for one device handle.
GPU_FIELDS: tuple[tuple[str, Callable[[Any, Any], float]], ...] = (
    ("util_percent", lambda nvml, h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
    ("mem_used_mb", lambda nvml, h: nvml.nvmlDeviceGetMemoryInfo(h).used / MIB),
    ("power_w", lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
    ("temp_c", lambda nvml, h: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))),
    ("sm_clock_mhz", lambda nvml, h: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
    ("throttle", _throttle),
)


def process_gpu_indices(device_count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The NVML devices of this process, as NVML indices (``"3"``) or UUIDs (``"GPU-..."``).

    ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs; empty or ``-1``: none) picks the visible
    devices, all of them without it; under a launcher (``LOCAL_RANK``) the one at that index.
    """
    env = os.environ if environ is None else environ
    visible_text = env.get("CUDA_VISIBLE_DEVICES")
    if visible_text is None:
        visible = [str(i) for i in range(device_count)]
    else:
        visible = []
        for part in (p.strip() for p in visible_text.split(",")):
            if not part or part.startswith("-"):
                break  # CUDA stops at the first invalid entry
            visible.append(part)
    local_rank = env.get("LOCAL_RANK")
    if local_rank is not None and local_rank.isdigit() and visible:
        return [visible[int(local_rank) % len(visible)]]
    return visible


class _Gpus:
    """NVML handles of this process's GPUs, and the fields each one has not refused."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        self.fields: list[list[tuple[str, Callable[[Any, Any], float]]]] = []
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            _log.debug("NVML not installed (pip install nvidia-ml-py): no sys/gpu* metrics")
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            for ident in process_gpu_indices(count):
                if ident.isdigit():
                    handle = pynvml.nvmlDeviceGetHandleByIndex(int(ident))
                else:
                    handle = pynvml.nvmlDeviceGetHandleByUUID(ident)
                self.handles.append(handle)
        except Exception as exc:  # no driver, no device: the machine has no GPU metrics
            _log.debug("NVML unavailable (%s): no sys/gpu* metrics", exc)
            self.handles = []
            return
        self.nvml = pynvml
        self.fields = [list(GPU_FIELDS) for _ in self.handles]

    def read(self, out: list[tuple[str, float]]) -> None:
        for index, (handle, fields) in enumerate(zip(self.handles, self.fields, strict=True)):
            for field in list(fields):
                name, read = field
                try:
                    value = read(self.nvml, handle)
                except Exception as exc:  # NVML_ERROR_NOT_SUPPORTED and kin: this field only
                    fields.remove(field)
                    _log.info(
                        "sys/gpu%d/%s is left out: NVML cannot read it (%s)", index, name, exc
                    )
                    continue
                out.append((f"sys/gpu{index}/{name}", value))

    def close(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None


# ---- psutil: the process and the host ----------------------------------------------------------


class SystemSampler:
    """Samples ``sys/*`` on its own daemon thread and hands each sample to ``emit``.

    ``emit`` receives ``(name, value)`` pairs (the pipeline places them at the current step).
    Counters that need a previous reading (CPU percentages, disk and network MiB) are primed
    by :meth:`prime`, which the sampler's thread runs first (NVML is opened there too), so
    nothing but the thread's start runs on the thread that builds it. :meth:`sample` takes
    one sample on the calling thread (tests, benchmarks: call :meth:`prime` first).
    """

    def __init__(
        self, emit: Callable[[Sample], None], interval_s: float, *, gpus: bool = True
    ) -> None:
        self.interval_s = interval_s
        self._emit = emit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._missing: set[str] = set()
        self._previous: dict[str, float] = {}
        try:
            import psutil
        except ImportError:
            _log.warning("psutil is not installed (pip install psutil): no sys/* metrics")
            self._psutil: Any = None
            self._process: Any = None
        else:
            self._psutil = psutil
            self._process = psutil.Process()
        self._want_gpus = gpus
        self._gpus: _Gpus | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Sample every ``interval_s`` on a daemon thread until :meth:`close`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="trainmon-system-metrics", daemon=True
            )
            self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        """Stop sampling (idempotent) and release NVML."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self._gpus is not None:
            self._gpus.close()

    def prime(self) -> None:
        """Open NVML and take a first reading of the counters, not emitted: psutil's first CPU
        percentage means nothing, and MiB "since the previous sample" need one."""
        self.sample()

    def _run(self) -> None:
        try:
            self.prime()
        except Exception:
            _log.warning("system metrics: could not take the first reading", exc_info=True)
        while not self._stop.wait(self.interval_s):
            try:
                items = self.sample()
                if items:
                    self._emit(items)
            except Exception:
                if not self._failed:
                    self._failed = True
                    _log.warning("system metrics: a sample failed; sampling goes on", exc_info=True)

    # ---- one sample ------------------------------------------------------------------------

    def sample(self) -> Sample:
        """One sample: every ``sys/*`` metric this machine has, as ``(name, value)`` pairs."""
        out: list[tuple[str, float]] = []
        if self._process is not None:
            process, psutil = self._process, self._psutil
            self._read(out, "sys/process_cpu_percent", lambda: process.cpu_percent(None))
            self._read(out, "sys/cpu_percent", lambda: psutil.cpu_percent(None))
            self._read(out, "sys/process_rss_mb", lambda: process.memory_info().rss / MIB)
            self._read_deltas(
                out,
                process.io_counters,
                (("sys/disk_read_mb", "read_bytes"), ("sys/disk_write_mb", "write_bytes")),
            )
            self._read_deltas(
                out,
                psutil.net_io_counters,
                (("sys/net_recv_mb", "bytes_recv"), ("sys/net_sent_mb", "bytes_sent")),
            )
        if self._gpus is None and self._want_gpus:
            self._gpus = _Gpus()
        if self._gpus is not None:
            self._gpus.read(out)
        return tuple(out)

    def _read(self, out: list[tuple[str, float]], name: str, read: Callable[[], Any]) -> None:
        if name in self._missing:
            return
        try:
            out.append((name, float(read())))
        except Exception as exc:  # AccessDenied, NotImplementedError: this machine has none
            self._leave_out(name, exc)

    def _read_deltas(
        self,
        out: list[tuple[str, float]],
        read: Callable[[], Any],
        fields: Sequence[tuple[str, str]],
    ) -> None:
        """MiB since the previous reading of counters that only grow (no value the first time)."""
        wanted = [(name, attr) for name, attr in fields if name not in self._missing]
        if not wanted:
            return
        try:
            counters = read()
        except Exception as exc:
            for name, _ in wanted:
                self._leave_out(name, exc)
            return
        for name, attr in wanted:
            total = getattr(counters, attr, None)
            if total is None:
                self._leave_out(name, AttributeError(attr))
                continue
            before = self._previous.get(name)
            self._previous[name] = float(total)
            if before is not None:
                out.append((name, max(0.0, float(total) - before) / MIB))

    def _leave_out(self, name: str, why: BaseException) -> None:
        self._missing.add(name)
        _log.info(
            "%s is left out: this machine does not provide it (%s: %s)",
            name,
            type(why).__name__,
            why,
        )


def start_sampler(emit: Callable[[Sample], None], interval_s: float) -> SystemSampler:
    """A started :class:`SystemSampler` (what the Monitor builds for ``system_metrics``)."""
    sampler = SystemSampler(emit, interval_s)
    sampler.start()
    return sampler
