"""Profiles on demand: a signal or a ``profile`` file makes the next steps run under
torch.profiler, and the Chrome trace is read back (gzip + JSON)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import free_port

import trainmon
from trainmon.collect.profiler import REQUEST_FILE, ProfileOnDemand
from trainmon.config import ProfilerConfig

pytest.importorskip("torch")

WORKER = Path(__file__).resolve().parents[1] / "scripts" / "profile_worker.py"


def _trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def _op_names(trace: dict[str, Any]) -> set[str]:
    return {event.get("name", "") for event in trace["traceEvents"]}


def _start(command: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "GLOO_SOCKET_IFNAME": "lo"},
    )


def _ready(proc: subprocess.Popen[str], ranks: int) -> dict[int, int]:
    """rank -> pid, from the workers' ``{"ready": pid}`` lines."""
    pids: dict[int, int] = {}
    assert proc.stdout is not None
    while len(pids) < ranks:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the worker ended early: {proc.communicate()}")
        for found in re.finditer(r'\{"ready": (\d+), "rank": (\d+)\}', line):
            pids[int(found.group(2))] = int(found.group(1))
    return pids


@pytest.mark.slow
def test_sigusr2_profiles_the_next_steps_of_a_running_loop(tmp_path: Path) -> None:
    """kill -USR2 on a running loop: the next 3 steps are profiled, the trace is a gzipped
    Chrome trace holding the loop's matmuls, and the log has a top-operators table."""
    proc = _start([sys.executable, str(WORKER), str(tmp_path)])
    try:
        pids = _ready(proc, 1)
        os.kill(pids[0], signal.SIGUSR2)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    traces = list((tmp_path / "job" / "profiles").glob("trace-rank0-step*.json.gz"))
    assert len(traces) == 1, stderr
    first = int(re.search(r"step(\d+)", traces[0].name).group(1))  # type: ignore[union-attr]
    assert first > 10  # after the signal, never before
    assert "aten::mm" in _op_names(_trace(traces[0]))
    assert f"profile of steps {first}..{first + 2} on rank 0" in stderr
    assert "top operators" in stderr and "aten::mm" in stderr
    assert not (tmp_path / "job" / REQUEST_FILE).exists()  # done: a new touch works again


@pytest.mark.slow
def test_one_signal_profiles_the_same_steps_on_every_rank(tmp_path: Path) -> None:
    """Under torchrun, SIGUSR2 to rank 1 alone profiles the same steps on ranks 0 and 1."""
    proc = _start(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(WORKER),
            str(tmp_path),
        ]
    )
    try:
        pids = _ready(proc, 2)
        os.kill(pids[1], signal.SIGUSR2)
        _, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    names = sorted(p.name for p in (tmp_path / "job" / "profiles").glob("*.json.gz"))
    assert len(names) == 2, (names, stderr)
    steps = {re.search(r"step(\d+)", name).group(1) for name in names}  # type: ignore[union-attr]
    assert len(steps) == 1, names  # the same steps on both ranks
    assert names == [f"trace-rank0-step{steps.pop()}.json.gz", names[1]]
    for name in names:
        assert "aten::mm" in _op_names(_trace(tmp_path / "job" / "profiles" / name))


def test_a_profile_file_in_the_run_folder_asks_for_a_profile(tmp_path: Path) -> None:
    """``touch RUN/profile`` in a running loop: the next steps are profiled, the trace is
    written, and the request file is removed; no file and no signal: no trace at all."""
    torch = pytest.importorskip("torch")
    config = {
        "console": {"enabled": False},
        "system_metrics": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "profiler": {"steps": 2},
    }
    run = tmp_path / "job"
    with trainmon.Monitor(config) as monitor:
        a = torch.randn(16, 16)
        for step in range(1, 30):
            a = torch.mm(a, a).tanh()
            monitor.step = step
            time.sleep(0.01)
        assert not (run / "profiles").exists()  # nothing asked, nothing profiled
        (run / REQUEST_FILE).touch()
        for step in range(30, 400):
            a = torch.mm(a, a).tanh()
            monitor.step = step
            time.sleep(0.01)
            if list((run / "profiles").glob("*.json.gz")):
                break
    traces = list((run / "profiles").glob("trace-rank0-step*.json.gz"))
    assert len(traces) == 1
    assert "aten::mm" in _op_names(_trace(traces[0]))
    assert not (run / REQUEST_FILE).exists()


def _rank_of_two(run: Path, step: list[int], poll_s: float) -> ProfileOnDemand:
    """One rank's profiler of two, signalled by hand, its loop's step read from ``step[0]``."""
    return ProfileOnDemand(
        ProfilerConfig(signal=None),
        run,
        world_size=2,
        current_step=lambda: step[0],
        poll_s=poll_s,
    )


def test_a_request_after_slow_first_steps_leads_by_the_fast_pace(tmp_path: Path) -> None:
    """Two ranks, the first steps slow (a warm-up), then fast: the request written on a signal
    starts far enough ahead at the fast pace for every rank's watcher to have read it (the
    lead is counted at the fastest recent pace, not the average since the slow steps)."""
    step = [0]
    profiler = _rank_of_two(tmp_path, step, poll_s=0.1)
    try:
        for _ in range(6):  # 4 steps a second
            step[0] += 1
            time.sleep(0.25)
        fast_from, began = step[0], time.monotonic()
        while time.monotonic() - began < 1.0:  # then as fast as sleeping 5 ms allows
            step[0] += 1
            time.sleep(0.005)
        fast_rate = (step[0] - fast_from) / (time.monotonic() - began)
        asked_at = step[0]
        profiler.signalled = True
        request_file = tmp_path / REQUEST_FILE
        deadline = time.monotonic() + 10
        while not request_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        request = json.loads(request_file.read_text())
    finally:
        profiler.close()
    lead = request["start_step"] - asked_at
    assert lead >= fast_rate * 1.5, (lead, fast_rate)  # 1.5 s of steps at the fast pace


def test_a_signal_before_the_pace_is_known_waits_for_it(tmp_path: Path) -> None:
    """Two ranks, a signal at the watcher's first look (no pace yet): the request is written
    at a later look, led by the pace measured by then (1.5 s of steps at least), not by a
    fixed guess that another rank's watcher can miss."""
    step = [0]
    profiler = _rank_of_two(tmp_path, step, poll_s=0.3)
    try:
        profiler.signalled = True  # before the first look
        began = time.monotonic()
        request_file = tmp_path / REQUEST_FILE
        while not request_file.exists() and time.monotonic() - began < 10:
            step[0] += 1
            time.sleep(0.005)
        written_at, elapsed = step[0], time.monotonic() - began
        request = json.loads(request_file.read_text())
    finally:
        profiler.close()
    assert elapsed >= 0.5  # not at the first look (0.3 s): the second, with a pace
    rate = written_at / elapsed
    assert request["start_step"] - written_at >= rate * 1.5 * 0.8, (request, rate)
