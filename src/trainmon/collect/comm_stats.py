"""DeepSpeed's arithmetic for collectives: message sizes, bandwidth formulas, summary rows.

Why apart from the logger: these are pure functions of sizes, group sizes and latencies (what a
test checks against DeepSpeed's own formulas), while :mod:`trainmon.collect.comms` is about
wrapping ``torch.distributed`` and timing calls without syncing the device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# Collective -> the parameter whose bytes are the "message size" (None: no tensor, e.g. barrier).
MESSAGE_PARAM: dict[str, str | None] = {
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
SUPPORTED_OPS: tuple[str, ...] = tuple(MESSAGE_PARAM)
"""The ``torch.distributed`` functions :meth:`CommsLogger.install` wraps (``prof_ops`` names)."""

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


def gbps(volume_bytes: float, latency_ms: float) -> float:
    """Gbit/s of ``volume_bytes`` moved in ``latency_ms`` (0 for no time)."""
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
    return gbps(size_bytes * alg, latency_ms), gbps(size_bytes * bus, latency_ms)


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


class Accumulator:
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
            algbw_gbps=gbps(self.alg_bytes, self.latency_ms),
            busbw_gbps=gbps(self.bus_bytes, self.latency_ms),
        )


def summary_table(stats: Mapping[str, Mapping[int, OpStats]]) -> str:
    """DeepSpeed's ``log_summary`` table: one block per collective, one row per message size."""
    width = 20
    lines = ["".join(f"{column: <{width}}" for column in _COLUMNS).rstrip()]
    for op, by_size in stats.items():
        lines.append(op)
        for size, row in by_size.items():
            lines.append(
                f"{' ': <{width}}{convert_size(size): <{width}}{row.count: <{width}}"
                f"{row.total_latency_ms: <{width}.2f}{row.avg_latency_ms: <{width}.2f}"
                f"{row.algbw_gbps: <{width}.2f}{row.busbw_gbps: <{width}.2f}".rstrip()
            )
    return "\n".join(lines)
