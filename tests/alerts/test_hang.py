"""``trainmon hang``: each rank's record of a stall, and the merged verdict."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import free_port

from trainmon.alerts.hang import diagnose, read_records, write_record
from trainmon.cli import main as cli_main

WORKER = Path(__file__).resolve().parents[1] / "scripts" / "hang_worker.py"
SLEEP_LINE = next(
    i for i, line in enumerate(WORKER.read_text().splitlines(), 1) if "time.sleep(600)" in line
)


def _record(rank: int, step: int, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "rank": rank,
        "world_size": 4,
        "time": time.time(),
        "step": step,
        "collective": None,
        "frames": [],
    }
    record.update(extra)
    return record


def _inside(op: str, seq: int) -> dict[str, Any]:
    return {"op": op, "seq": seq, "group": "world", "inside": True, "entered_at": time.time()}


def _frame(function: str, file: str, line: int, kind: str = "user") -> dict[str, Any]:
    return {"function": function, "file": file, "line": line, "kind": kind}


def test_verdict_names_who_waits_and_where_the_one_behind_is(tmp_path: Path) -> None:
    """Three ranks inside all_reduce #1043 and one in its data loader: the verdict names the
    waiters by their collective and the other rank by step, function and file:line; a rank
    with no record is named as missing."""
    waiting = [_frame("all_reduce", "/x/torch/distributed/distributed_c10d.py", 2100, "library")]
    for rank in (0, 2):
        write_record(tmp_path, _record(rank, 41, collective=_inside("all_reduce", 1043)))
    write_record(
        tmp_path,
        _record(
            1,
            41,
            collective={**_inside("all_reduce", 1042), "inside": False},
            frames=[_frame("slow_data_loader", "/job/data.py", 88), _frame("train", "t.py", 9)],
        ),
    )
    records = read_records(tmp_path)
    verdict = diagnose(records, 4)
    assert verdict.line == (
        "ranks 0, 2 wait in all_reduce #1043; rank 1 is at step 41 in slow_data_loader "
        "(data.py:88); no record from rank 3 (still stepping, crashed, or its run folder is "
        "not shared)"
    )
    assert verdict.behind == [1] and verdict.missing == [3]
    # without the comms record, a torch.distributed frame still says where a rank waits
    write_record(tmp_path, _record(3, 41, frames=waiting))
    assert (
        "rank 3 is at step 41 inside all_reduce (seq. unknown)"
        in diagnose(read_records(tmp_path)).line
    )


def test_without_collectives_the_lowest_step_is_behind(tmp_path: Path) -> None:
    """Nobody inside a collective: the rank at the lowest step is the one named."""
    write_record(tmp_path, _record(0, 12, frames=[_frame("step", "a.py", 3)], world_size=2))
    write_record(tmp_path, _record(1, 10, frames=[_frame("load", "b.py", 7)], world_size=2))
    assert diagnose(read_records(tmp_path)).line == "rank 1 is at step 10 in load (b.py:7)"


def test_hang_command_without_records_says_what_writes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder without hang records is exit 1 with a message naming the stall rule."""
    assert cli_main(["hang", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no hang record" in err and '"kind": "stall"' in err


def _hang(run: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "trainmon", "hang", str(run)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.slow
def test_two_ranks_hung_under_torchrun(tmp_path: Path) -> None:
    """Rank 1 sleeps in slow_data_loader while rank 0 waits in all_reduce: ``trainmon hang``,
    run while they are stuck and again after the job was killed, names both; the stall alert
    of rank 0 carries the same verdict."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(WORKER),
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so the whole job can be killed
    )
    run = tmp_path / "job"
    expected = (
        f"rank 0 waits in all_reduce #4; rank 1 is at step 3 in slow_data_loader "
        f"(hang_worker.py:{SLEEP_LINE})"
    )
    try:
        deadline = time.monotonic() + 90
        alerts = run / "alerts.jsonl"
        while time.monotonic() < deadline:
            if len(read_records(run)) == 2 and alerts.exists() and "verdict" in alerts.read_text():
                break
            if proc.poll() is not None:
                pytest.fail(f"the job ended: {proc.communicate()}")
            time.sleep(0.2)
        else:
            pytest.fail(f"no hang records after 90 s: {sorted(os.listdir(run))}")
        while_hung = _hang(run)
        assert proc.poll() is None  # still hung while it was diagnosed
        assert while_hung.returncode == 0, while_hung.stderr
        lines = while_hung.stdout.splitlines()
        assert lines[0] == expected
        assert any("last collective: all_reduce #4 on world (inside" in line for line in lines)
        firing = [json.loads(line) for line in alerts.read_text().splitlines()]
        firing = [a for a in firing if a.get("state") == "firing"]
        assert firing and firing[0]["details"]["verdict"] == expected
        assert f"verdict: {expected}" in firing[0]["message"]
    finally:
        for pid_file in tmp_path.glob("pid-rank*.txt"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    after_kill = _hang(run)
    assert after_kill.returncode == 0 and after_kill.stdout.splitlines()[0] == expected


def test_hang_command_prints_the_verdict_and_each_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainmon hang RUN`` prints the verdict first, then a block per rank; ``--json`` gives
    the same verdict with every record, and ``--world-size`` names the ranks with none."""
    write_record(tmp_path, _record(0, 7, collective=_inside("barrier", 9), world_size=2))
    write_record(tmp_path, _record(1, 6, frames=[_frame("load", "/d/data.py", 5)], world_size=2))
    assert cli_main(["hang", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "rank 0 waits in barrier #9; rank 1 is at step 6 in load (data.py:5)"
    assert "  last collective: barrier #9 on world (inside for 0 s)" in lines
    assert "    load (/d/data.py:5) [user]" in lines
    assert cli_main(["hang", str(tmp_path), "--json", "--world-size", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["behind"] == [1] and out["missing"] == [2]
    assert out["waiting"] == {"barrier #9": [0]}
    assert out["ranks"]["1"]["step"] == 6
