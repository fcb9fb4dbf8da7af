"""``trainmon hang``: each rank's record of a stall, and the merged verdict."""

from __future__ import annotations

import contextlib
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


# ---- is the verdict about now? ----------------------------------------------------------------

STALL_WORKER = Path(__file__).resolve().parents[1] / "scripts" / "stall_worker.py"


def _stall_config(out: Path) -> dict[str, Any]:
    """JSONL and the alert file under ``out/job``, a stall rule of 0.3 s."""
    return {
        "console": {"enabled": False},
        "system_metrics": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "alerts": {
            "rules": [{"name": "hang", "kind": "stall", "seconds": 0.3}],
            "sinks": [{"type": "file"}],
        },
    }


def _steps(monitor: trainmon.Monitor, first: int, last: int) -> None:
    for step in range(first, last + 1):
        monitor.step = step
        monitor.log({"train/loss": 1.0 / step})
        time.sleep(0.01)


def _until_stall_fired(run: Path) -> None:
    """Wait (the training thread's way: not stepping) until the stall alert was delivered."""
    deadline = time.monotonic() + 20
    alerts = run / "alerts.jsonl"
    while not (alerts.exists() and '"firing"' in alerts.read_text() and read_records(run)):
        assert time.monotonic() < deadline, "the stall rule did not fire within 20 s"
        time.sleep(0.05)


def _hang_json(run: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert cli_main(["hang", str(run), "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_stall_that_resolved_before_a_normal_end_is_not_reported_as_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Monitor whose stall fired, then trained on and closed normally: ``trainmon hang`` exits
    0 saying the stall was resolved and the run ended with status success, not that a rank is
    hung; ``--json`` has current false and the same story as ``stale_reason``."""
    with trainmon.Monitor(_stall_config(tmp_path)) as monitor:
        _steps(monitor, 1, 5)
        _until_stall_fired(tmp_path / "job")
        _steps(monitor, 6, 10)
    run = tmp_path / "job"
    assert cli_main(["hang", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("not hung now: the stall was resolved at ")
    assert re.search(r", when training steps resumed at step ([6-9]|10), and the run", lines[0])
    assert "and the run ended at " in lines[0] and "with status success at step 10" in lines[0]
    assert lines[1].startswith("the records, written at ")
    assert "show a past stall: rank 0 is at step 5 in " in lines[1]
    out = _hang_json(run, capsys)
    assert out["current"] is False and out["stale_reason"] == lines[0].removeprefix(
        "not hung now: "
    )
    assert [event["what"] for event in out["since"]] == ["resolved", "ended"]
    assert out["since"][1]["status"] == "success"
    # without the alert file, the journal's own steps after the stall tell the same
    (run / "alerts.jsonl").unlink()
    out = _hang_json(run, capsys)
    assert out["current"] is False
    assert out["stale_reason"].startswith("training went on after the stall: step 10 was logged")
    assert [event["what"] for event in out["since"]] == ["resumed", "ended"]


def test_hang_is_current_while_the_job_is_stuck_and_not_once_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the training thread is stuck (records newer than every journal line, no end) the
    verdict is current; once the Monitor closed with the stall still firing, it says the run
    ended and when."""
    run = tmp_path / "job"
    with trainmon.Monitor(_stall_config(tmp_path)) as monitor:
        _steps(monitor, 1, 5)
        _until_stall_fired(run)
        monitor.flush()
        assert cli_main(["hang", str(run)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("rank 0 is at step 5 in _until_stall_fired (test_hang.py:")
        assert lines[1].startswith("hung now: the records were written at ")
        out = _hang_json(run, capsys)
        assert out["current"] is True and out["stale_reason"] is None and out["since"] == []
        assert out["checked"] == [str(run / "metrics.jsonl"), str(run / "alerts.jsonl")]
    out = _hang_json(run, capsys)
    assert out["current"] is False and [e["what"] for e in out["since"]] == ["ended"]
    assert re.fullmatch(
        r"the run ended at \d\d:\d\d:\d\d \(\d+ s ago\) with status success at step 5",
        out["stale_reason"],
    )


def test_records_of_a_killed_attempt_predate_a_rerun_that_succeeded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An attempt killed while stalled leaves its records; a rerun into the same folder that
    ends with success makes ``trainmon hang`` say the records predate that later attempt (its
    pid, when it started, how it ended) and exit 0 with current false."""
    run = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, str(STALL_WORKER), str(tmp_path), "sleep"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not read_records(run):
            assert proc.poll() is None and time.monotonic() < deadline, "no stall record"
            time.sleep(0.02)
    finally:
        proc.kill()  # the dead attempt: no end line
        proc.wait(timeout=30)
    old = read_records(run)[0]
    assert old["pid"] == proc.pid
    config = _stall_config(tmp_path)
    config["alerts"]["rules"][0]["seconds"] = 60
    with trainmon.Monitor(config) as monitor:
        _steps(monitor, 1, 3)
    assert cli_main(["hang", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        f"not hung now: these records predate a later attempt: a new attempt (pid {os.getpid()}) "
        "started at "
    )
    assert ", after they were written; it ended at " in lines[0]
    assert "; it ended at " in lines[0] and lines[0].endswith("with status success at step 3")
    assert "show a past stall: rank 0 is at step 20 in block_in_sleep" in lines[1]
    assert f"rank 0 ({old['host']}, pid {proc.pid}): last step 20" in "\n".join(lines)
    out = _hang_json(run, capsys)
    assert out["current"] is False and out["stale_reason"].startswith("these records predate")
    (later,) = out["since"]
    assert later["what"] == "later_attempt" and later["pid"] == os.getpid()
    assert later["end"]["status"] == "success"


def test_a_stale_rank_record_is_left_out_of_a_current_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank's record older than the running attempt is left out of the verdict, with why,
    while the record this attempt's stall wrote keeps the verdict current."""
    run = tmp_path / "job"
    write_record(run, _record(1, 3, world_size=2, time=time.time() - 60))
    with trainmon.Monitor(_stall_config(tmp_path)) as monitor:
        _steps(monitor, 1, 5)
        _until_stall_fired(run)
        monitor.flush()
        out = _hang_json(run, capsys)
        assert out["current"] is True and out["stale_reason"] is None
        assert out["verdict"].startswith("rank 0 is at step 5 in _until_stall_fired")
        assert list(out["left_out"]) == ["1"]
        assert out["left_out"]["1"].startswith("these records predate a later attempt")
        assert cli_main(["hang", str(run)]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed[2].startswith("left out: rank 1's record (these records predate a later")


def test_damaged_records_are_counted_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records that are not JSON, cut short or not shaped like a record are named with what is
    wrong, next to the verdict of the readable ones; with no readable one the command says all
    are damaged (not "no hang record") and exits 1."""
    write_record(tmp_path, _record(0, 7, frames=[_frame("load", "/d/data.py", 5)], world_size=2))
    (tmp_path / "hang-rank1.json").write_text("garbage")
    (tmp_path / "rank-2").mkdir()
    (tmp_path / "rank-2" / "hang-rank2.json").write_text('{"rank": 2, "time": 17')
    (tmp_path / "hang-rank3.json").write_text("[1, 2]")
    assert cli_main(["hang", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "rank 0 is at step 7 in load (data.py:5); no record from rank 1 (still " + (
        "stepping, crashed, or its run folder is not shared)"
    )
    assert (
        "3 damaged records: hang-rank1.json (not JSON), hang-rank3.json (not a hang record: a "
        "JSON list, not an object), rank-2/hang-rank2.json (not JSON: cut short)"
    ) in lines
    out = _hang_json(tmp_path, capsys)
    assert out["damaged"] == [
        {"file": "hang-rank1.json", "reason": "not JSON"},
        {"file": "hang-rank3.json", "reason": "not a hang record: a JSON list, not an object"},
        {"file": "rank-2/hang-rank2.json", "reason": "not JSON: cut short"},
    ]
    (tmp_path / "hang-rank0.json").write_text('{"rank": 0}')
    assert cli_main(["hang", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no hang record" not in err and "every hang record is damaged" in err
    assert "4 damaged records: hang-rank0.json (not a hang record: no time)" in err
