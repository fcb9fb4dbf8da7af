"""Hang records across nodes that share no folder: carried by the job's torch.distributed store."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from tests.conftest import free_port

from trainmon.alerts.hang import GONE_AFTER_S, diagnose, read_records
from trainmon.alerts.hang_store import HangStore
from trainmon.cli import main as cli_main

WORKER = Path(__file__).resolve().parents[1] / "scripts" / "hang_worker.py"
SLEEP_LINE = next(
    i for i, line in enumerate(WORKER.read_text().splitlines(), 1) if "time.sleep(600)" in line
)
EXPECTED = (
    "rank 0 waits in all_reduce #4; rank 1 is at step 3 in slow_data_loader "
    f"(hang_worker.py:{SLEEP_LINE})"
)


def _agent(node: int, port: int, out: Path) -> subprocess.Popen[bytes]:
    """One torchrun agent ("node") with its own working folder and output folder; its worker
    stays alive when its peer dies (``--stay``), as one inside an NCCL collective would."""
    out.mkdir(parents=True)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
        "--nproc_per_node", "1", "--rdzv_backend", "static", "--master_addr", "127.0.0.1",
        "--master_port", str(port), str(WORKER), str(out), "--stay",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(out.parent / f"agent{node}.log", "wb") as log:
        return subprocess.Popen(
            command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # so the whole node can be killed
        )  # fmt: skip


def _kill(proc: subprocess.Popen[bytes], out: Path) -> None:
    """Kill a node: its worker (torchrun gives it a session of its own) and its agent."""
    for pid_file in out.glob("pid-rank*.txt"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _hang(run: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert cli_main(["hang", str(run)]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.slow
def test_rank_on_another_node_is_named_via_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no shared folder, rank 0's folder gets rank 1's record from the job's store, so
    ``trainmon hang`` names where rank 1 is while hung; once node 1 is killed (its worker and
    its torchrun agent) while rank 0 stays stuck in the collective, rank 1 is named as gone,
    from its last_seen in the store falling behind rank 0's, also after the job ended."""
    port = free_port()
    out0, out1 = tmp_path / "node0", tmp_path / "node1"
    agents = [_agent(0, port, out0), _agent(1, port, out1)]
    run0, run1 = out0 / "job", out1 / "job"
    try:
        deadline = time.monotonic() + 60
        while not (run0 / "hang-rank1.json").exists():
            if time.monotonic() > deadline:
                logs = [(tmp_path / f"agent{n}.log").read_text()[-3000:] for n in (0, 1)]
                pytest.fail(f"no hang-rank1.json in rank 0's folder after 60 s: {logs}")
            assert all(a.poll() is None for a in agents), "a node ended"
            time.sleep(0.2)
        lines = _hang(run0, capsys)
        assert all(a.poll() is None for a in agents)  # diagnosed while hung
        assert lines[0] == EXPECTED
        assert any(line.startswith("rank 1 (") and "via the job's store" in line for line in lines)
        copied = orjson.loads((run0 / "hang-rank1.json").read_bytes())
        assert copied["via"] == "store" and copied["rank"] == 1
        assert Path(copied["stack_file"]).parent == run1  # written on node 1, named on node 0
        # rank 1's files: its own folder, and only the record copied into rank 0's
        rank1_files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*rank1*")}
        assert rank1_files - {"node0/job/hang-rank1.json"} == {
            p.relative_to(tmp_path).as_posix() for p in out1.rglob("*rank1*")
        }
        journal = (run0 / "metrics.jsonl").read_bytes().splitlines()
        ranks = {orjson.loads(line).get("rank") for line in journal if b'"meta"' in line}
        assert ranks == {0}  # rank 0's folder holds no journal of rank 1
        assert (
            not (run1 / "metrics.jsonl").exists()
            or b'"rank": 0' not in (run1 / "metrics.jsonl").read_bytes()
        )

        _kill(agents[1], out1)  # node 1 is gone; its last record stays readable on node 0
        killed = time.monotonic()
        gone = "rank 1 (host " + copied["host"] + "): gone — no sign of life for "
        while True:  # rank 0, still stuck, refreshes its own last_seen; rank 1's falls behind
            lines = _hang(run0, capsys)
            if gone in lines[0] and lines[0].endswith(" s (its node/agent stopped)"):
                break
            assert time.monotonic() - killed < 3 * GONE_AFTER_S, lines
            time.sleep(1.0)
        assert agents[0].poll() is None  # rank 0 still runs, stuck
        assert lines[0].startswith("rank 0 waits in all_reduce #4; " + gone), lines[0]
        assert "is at step 3" not in lines[0]  # not as a rank behind: it is gone
        assert any("via the job's store" in line for line in lines)  # its block, where it was
        assert any("slow_data_loader" in line for line in lines)
        # from the records alone (no look at processes): the store's last_seen says it
        records = read_records(run0)
        assert records[1]["last_seen"] < records[0]["last_seen"] - GONE_AFTER_S
        assert gone in diagnose(records).line
        capsys.readouterr()
        assert cli_main(["hang", "--json", str(run0)]) == 0
        assert orjson.loads(capsys.readouterr().out)["gone"] == [1]

        _kill(agents[0], out0)  # the whole job ended: rank 1 is still named as gone
        assert gone in _hang(run0, capsys)[0]
    finally:
        for agent, out in zip(agents, (out0, out1), strict=True):
            _kill(agent, out)


def test_without_torch_distributed_the_store_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single process (no MASTER_ADDR, or no process group) opens nothing and never waits."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    store = HangStore("job", 0)
    started = time.monotonic()
    assert not store.publish_record({"rank": 0, "time": 1.0, "step": 1})
    assert not store.publish_state(1, stalled=True)
    assert store.fetch([1, 2]) == {} and not store.usable
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    lazy = HangStore("job", 0)  # torch.distributed not initialised here: nothing opened
    assert lazy.fetch([1]) == {} and lazy.usable
    assert time.monotonic() - started < 1.0


@pytest.mark.slow
def test_records_and_states_go_through_the_store_and_a_dead_store_is_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a real TCPStore, rank 0 reads rank 1's record and last state; a store that
    cannot be reached is tried once, then left alone."""
    import torch.distributed as dist

    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        rank0, rank1 = HangStore("job", 0), HangStore("job", 1)
        assert rank1.publish_state(3, stalled=False, now=10.0)
        assert not rank1.publish_state(3, stalled=False, now=20.0)  # unchanged, not stalled
        record = {"rank": 1, "time": time.time(), "step": 3, "path": "x"}
        assert rank1.publish_record(record, now=20.5)  # and its stalled state with it
        assert not rank1.publish_state(3, stalled=True, now=21.0)
        assert rank1.publish_state(3, stalled=True, now=26.0)  # heartbeat while stalled
        found = rank0.fetch([0, 1, 2])
        assert list(found) == [1] and found[1]["via"] == "store" and "path" not in found[1]
        assert found[1]["last_seen"] == rank0.states([1])[1]["time"]
        assert found[1]["last_state"]["record_time"] == record["time"]
        assert rank0.fetch([1], newer_than=time.time() + 60) == {}

        monkeypatch.setenv("MASTER_PORT", str(free_port()))  # nobody listens there
        dead = HangStore("job", 0)
        started = time.monotonic()
        assert dead.fetch([1]) == {} and not dead.usable
        assert dead.fetch([1]) == {} and not dead.publish_state(1, stalled=True)
        assert time.monotonic() - started < 10.0  # one try (CONNECT_TIMEOUT_S), no loop
    finally:
        dist.destroy_process_group()
