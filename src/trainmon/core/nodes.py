"""Statistics across nodes: each node's ``sys/*`` figures, from the cross-rank gather.

A job on several nodes (machines) has one figure per node for each system metric: the node's
ranks combined by the metric's :data:`NODE_RULES` (the processes' CPU, memory and disk I/O
summed, the host's CPU and network read once, GPU heat and throttling as the worst GPU). The
logging rank gets every rank's figures in the one ``gather`` per window that already carries
the cross-rank row (:mod:`trainmon.core.cross_rank`), and writes for each metric

* ``<metric>/nodes/min``, ``<metric>/nodes/mean``, ``<metric>/nodes/max``: over the nodes;
* ``<metric>/nodes/argmax_node_rank``: the node with the highest figure, as its node rank
  (torchrun's ``--node_rank``, ``GROUP_RANK`` in its workers).

Which node a rank is on, and that node's host name, go into the first gather only (a few more
columns in the row, once): the node rank from the launcher (``GROUP_RANK``, else Slurm's
``SLURM_NODEID``), else the host name, nodes then numbered in the order of their lowest rank.
A job on one node writes no node statistics (they would repeat the rank statistics).

A leaf: imports nothing from trainmon but :mod:`trainmon.core.events`; never imports torch.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainmon.core.events import Number

__all__ = [
    "HOST_METRICS",
    "IDENTITY_COLUMNS",
    "NODE_RULES",
    "Node",
    "identity_row",
    "node_rank",
    "nodes_of",
    "pack_host",
    "summarise_nodes",
    "unpack_host",
]

#: Host-wide metrics (the same on every rank of a node), reduced across nodes only:
#: (metric, which window statistic), like :data:`trainmon.core.cross_rank.REDUCED_METRICS`.
HOST_METRICS: tuple[tuple[str, str], ...] = (
    ("sys/cpu_percent", "mean"),
    ("sys/net_recv_mb", "mean"),
    ("sys/net_sent_mb", "mean"),
)
#: How a node's ranks combine into the node's figure: ``sum`` for what each process adds to the
#: machine's load, ``mean`` for a level (one host read by each rank, or each rank's own GPU),
#: ``max`` for the worst GPU (temperature, throttle reasons).
NODE_RULES: Mapping[str, str] = {
    "sys/process_cpu_percent": "sum",
    "sys/process_rss_mb": "sum",
    "sys/disk_read_mb": "sum",
    "sys/disk_write_mb": "sum",
    "sys/cpu_percent": "mean",
    "sys/net_recv_mb": "mean",
    "sys/net_sent_mb": "mean",
    "sys/gpu0/util_percent": "mean",
    "sys/gpu0/mem_used_mb": "sum",
    "sys/gpu0/power_w": "sum",
    "sys/gpu0/temp_c": "max",
    "sys/gpu0/sm_clock_mhz": "mean",
    "sys/gpu0/throttle": "max",
}
#: Launcher variables holding this process's node rank, first found wins.
NODE_RANK_VARIABLES = ("GROUP_RANK", "SLURM_NODEID")

_HOST_CHUNK = 6  # bytes per float64 column: below 2**53, so exact
_HOST_FLOATS = 11  # 66 bytes: a host name's limit on Linux is 64
#: Columns :func:`identity_row` adds to the first gather's row: the node rank, then the host.
IDENTITY_COLUMNS = 1 + _HOST_FLOATS


def node_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's node rank from the launcher's environment; -1 when none says."""
    env = os.environ if env is None else env
    for key in NODE_RANK_VARIABLES:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return -1


def pack_host(host: str) -> list[float]:
    """``host`` (its first 66 UTF-8 bytes) as :data:`_HOST_FLOATS` exact float64 values."""
    data = host.encode("utf-8")[: _HOST_CHUNK * _HOST_FLOATS]
    data = data.ljust(_HOST_CHUNK * _HOST_FLOATS, b"\0")
    return [
        float(int.from_bytes(data[i : i + _HOST_CHUNK], "big"))
        for i in range(0, len(data), _HOST_CHUNK)
    ]


def unpack_host(values: Sequence[float]) -> str:
    """The host name :func:`pack_host` packed ("?" for values that are not such a packing)."""
    try:
        data = b"".join(int(v).to_bytes(_HOST_CHUNK, "big") for v in values)
    except (OverflowError, ValueError):
        return "?"
    return data.rstrip(b"\0").decode("utf-8", errors="replace") or "?"


def identity_row(env: Mapping[str, str] | None = None, host: str | None = None) -> list[float]:
    """This rank's node rank and host, as the first gather carries them."""
    return [float(node_rank(env)), *pack_host(socket.gethostname() if host is None else host)]


@dataclass(frozen=True)
class Node:
    """One node of the job: its node rank, its host and its ranks."""

    rank: int
    host: str
    ranks: tuple[int, ...]

    def describe(self) -> str:
        """``node 1 = gpu-b7 (ranks 8–15)``."""
        ranks = self.ranks
        if len(ranks) == 1:
            which = f"rank {ranks[0]}"
        elif list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
            which = f"ranks {ranks[0]}–{ranks[-1]}"
        else:
            which = "ranks " + ", ".join(map(str, ranks))
        return f"node {self.rank} = {self.host} ({which})"


def nodes_of(identities: Sequence[Sequence[float]]) -> tuple[list[int], list[Node]]:
    """From every rank's :func:`identity_row` (row index = rank): each rank's node rank, and
    the nodes. The launcher's node ranks when every rank has one, else the host names, nodes
    numbered in the order of their lowest rank."""
    keys = [(int(row[0]), unpack_host(row[1:])) for row in identities]
    members: dict[tuple[int, str], list[int]] = {}
    for rank, key in enumerate(keys):
        members.setdefault(key, []).append(rank)
    launcher = all(node >= 0 for node, _ in keys) and len({n for n, _ in keys}) == len(members)
    number = {
        key: (key[0] if launcher else index) for index, key in enumerate(members)
    }  # dicts keep insertion order: the order of each node's lowest rank
    nodes = sorted(
        (Node(number[key], key[1], tuple(ranks)) for key, ranks in members.items()),
        key=lambda node: node.rank,
    )
    return [number[key] for key in keys], nodes


def _combine(rule: str, values: Sequence[float]) -> float:
    if rule == "sum":
        return math.fsum(values)
    if rule == "max":
        return max(values)
    return math.fsum(values) / len(values)


def summarise_nodes(
    columns: Mapping[str, Sequence[float]], node_of: Sequence[int]
) -> dict[str, Number]:
    """Across-node statistics from each rank's figure per metric (``columns[name][rank]``, NaN
    where the rank has none) and each rank's node rank; empty for a job on one node."""
    if len(set(node_of)) < 2:
        return {}
    out: dict[str, Number] = {}
    for name, values in columns.items():
        per_node: dict[int, list[float]] = {}
        for value, node in zip(values, node_of, strict=True):
            if not math.isnan(value):
                per_node.setdefault(node, []).append(value)
        if not per_node:
            continue
        rule = NODE_RULES.get(name, "mean")
        figures = {node: _combine(rule, vs) for node, vs in per_node.items()}
        top_value, top_node = max((v, -n) for n, v in figures.items())  # ties: the lowest node
        out[f"{name}/nodes/min"] = min(figures.values())
        out[f"{name}/nodes/mean"] = math.fsum(figures.values()) / len(figures)
        out[f"{name}/nodes/max"] = top_value
        out[f"{name}/nodes/argmax_node_rank"] = -top_node
    return out
