"""System metrics across nodes: each node's ``sys/*`` figures reach rank 0 in the one gather per
window, and rank 0 writes their min, mean and max over the nodes and the node with the most."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port
from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.cross_rank import REDUCED_METRICS, pack_window, summarise_ranks
from trainmon.core.nodes import (
    HOST_METRICS,
    identity_row,
    node_rank,
    nodes_of,
    pack_host,
    unpack_host,
)
from trainmon.journal import read_journal

WORKER = Path(__file__).resolve().parents[1] / "scripts" / "node_sys_worker.py"
STAT = dict(REDUCED_METRICS + HOST_METRICS)


def _window(last_step: int, values: dict[str, float]) -> WindowStats:
    metrics = {name: MetricStats(2, v, v, v, v) for name, v in values.items()}
    return WindowStats(last_step - 9, last_step, 0.0, 1.0, metrics)


def test_node_figures_combine_each_nodes_ranks_by_the_metrics_rule() -> None:
    """Four ranks on two nodes: process CPU and RSS add up per node, the host's CPU is read
    once per node, GPU temperature is the node's hottest GPU; one node, no node statistics."""
    ranks = [
        {"sys/process_cpu_percent": 100.0, "sys/cpu_percent": 50.0, "sys/gpu0/temp_c": 60.0},
        {"sys/process_cpu_percent": 80.0, "sys/cpu_percent": 52.0, "sys/gpu0/temp_c": 81.0},
        {"sys/process_cpu_percent": 95.0, "sys/cpu_percent": 90.0, "sys/gpu0/temp_c": 70.0},
        {"sys/process_cpu_percent": 95.0, "sys/cpu_percent": 92.0},  # no GPU figure
    ]
    rows = [pack_window(_window(10, values)) for values in ranks]
    out = summarise_ranks(rows, node_of=[0, 0, 1, 1])
    assert out["sys/process_cpu_percent/nodes/min"] == 180.0
    assert out["sys/process_cpu_percent/nodes/max"] == 190.0
    assert out["sys/process_cpu_percent/nodes/mean"] == 185.0
    assert out["sys/process_cpu_percent/nodes/argmax_node_rank"] == 1
    assert out["sys/cpu_percent/nodes/max"] == 91.0 and out["sys/cpu_percent/nodes/min"] == 51.0
    assert out["sys/gpu0/temp_c/nodes/max"] == 81.0
    assert out["sys/gpu0/temp_c/nodes/argmax_node_rank"] == 0
    assert "sys/gpu0/power_w/nodes/max" not in out  # no node has it: left out, not zero
    assert "sys/cpu_percent/max" not in out  # host-wide: across nodes only
    assert out["sys/process_cpu_percent/max"] == 100.0  # the rank statistics are as before
    one_node = summarise_ranks(rows, node_of=[0, 0, 0, 0])
    assert not any("/nodes/" in name for name in one_node)


def test_node_identity_from_the_launcher_else_the_host() -> None:
    """The launcher's node rank (torchrun's GROUP_RANK, Slurm's SLURM_NODEID) wins; without
    it, ranks on one host are one node, numbered in the order of their lowest rank."""
    assert node_rank({"GROUP_RANK": "3"}) == 3 and node_rank({"SLURM_NODEID": "2"}) == 2
    assert node_rank({}) == -1
    for host in ("gpu-b7.cluster.example.org", "x" * 64, "nœud-1", ""):
        assert unpack_host(pack_host(host)) == (host or "?")
    rows = [identity_row({}, h) for h in ("b", "b", "a", "a", "b")]
    node_of, nodes = nodes_of(rows)
    assert node_of == [0, 0, 1, 1, 0]
    assert [n.describe() for n in nodes] == ["node 0 = b (ranks 0, 1, 4)", "node 1 = a (ranks 2–3)"]
    same_host = [identity_row({"GROUP_RANK": str(n)}, "vm") for n in (1, 0)]
    assert nodes_of(same_host)[0] == [1, 0]  # two agents on one machine are two nodes


def _agent(node: int, port: int, out: Path) -> subprocess.Popen[bytes]:
    out.mkdir(parents=True)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
        "--nproc_per_node", "1", "--rdzv_backend", "static", "--master_addr", "127.0.0.1",
        "--master_port", str(port), str(WORKER), str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = open(out.parent / f"agent{node}.log", "wb")  # noqa: SIM115 - closed by the test
    return subprocess.Popen(command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT)


def _windows(journal: Path) -> dict[int, dict[str, Any]]:
    """last step -> the stats of the first window ending there (the one that was gathered)."""
    found: dict[int, dict[str, Any]] = {}
    for record in read_journal(journal):
        if record["kind"] == "window":
            found.setdefault(record["last_step"], record["stats"])
    return found


@pytest.mark.slow
def test_rank_zero_writes_system_metrics_across_two_nodes(tmp_path: Path) -> None:
    """Two torchrun agents ("nodes"), one rank each: rank 0's windows hold, for each sys metric,
    min/mean/max over the nodes equal to the two nodes' own window figures, and name node 1
    (the one keeping a core busy) as the node with the most process CPU."""
    port = free_port()
    outs = [tmp_path / "node0", tmp_path / "node1"]
    agents = [_agent(node, port, out) for node, out in enumerate(outs)]
    try:
        codes = [agent.wait(timeout=120) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    logs = [(tmp_path / f"agent{n}.log").read_text()[-3000:] for n in (0, 1)]
    assert codes == [0, 0], logs
    rank0 = _windows(outs[0] / "job" / "rank-0" / "metrics.jsonl")
    rank1 = _windows(outs[1] / "job" / "rank-1" / "metrics.jsonl")
    assert sorted(rank0)[:4] == [10, 20, 30, 40]
    checked = set()
    for last_step in (10, 20, 30, 40):
        stats, theirs = rank0[last_step], rank1[last_step]
        assert stats["sys/process_cpu_percent/nodes/argmax_node_rank"]["last"] == 1
        for name, stat in STAT.items():
            if not name.startswith("sys/") or name not in stats or name not in theirs:
                continue
            figures = [stats[name][stat], theirs[name][stat]]  # one rank per node
            assert stats[f"{name}/nodes/min"]["last"] == pytest.approx(min(figures))
            assert stats[f"{name}/nodes/max"]["last"] == pytest.approx(max(figures))
            assert stats[f"{name}/nodes/mean"]["last"] == pytest.approx(math.fsum(figures) / 2)
            checked.add(name)
    assert {"sys/process_cpu_percent", "sys/process_rss_mb", "sys/cpu_percent"} <= checked
    assert not (outs[1] / "job" / "rank-0").exists()  # node 1 wrote only its own rank's folder
