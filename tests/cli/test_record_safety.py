"""The tools that read and rewrite a run never destroy, duplicate or mix its record: ``report``
and ``sync`` refuse to write over or into the run's files, a sync never touches another
run's files, and a sync killed at any moment leaves, after a rerun, one copy of each step."""

from __future__ import annotations

import csv
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.cli import main


def _journal(base: Path, job: str = "job", steps: int = 40, offset: float = 0.0) -> Path:
    """A run folder ``base/job`` with a journal of ``steps`` steps (loss = offset + step)."""
    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": job},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, steps + 1):
            monitor.step = step
            monitor.write_events([("loss", offset + step)])
    return base / job


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the digest of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _raw_loss(folder: Path) -> list[tuple[int, float]]:
    """Every ``loss`` event of every event file in ``folder``, read without applying purge
    markers (as TensorBoard's fast data loader and many scripts read them)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = []
    for path in sorted(folder.glob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == "loss":
                    number = value.simple_value if value.HasField("simple_value") else None
                    if number is None:
                        number = value.tensor.float_val[0]
                    found.append((event.step, number))
    return found


def _accumulated_loss(folder: Path) -> list[tuple[int, float]]:
    """``loss`` as TensorBoard's EventAccumulator shows it (purge markers applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("loss")]


def _csv_rows(path: Path) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return [(int(step), float(value)) for step, value in rows[1:]]


@pytest.mark.parametrize("name", ["metrics.jsonl", "alerts.jsonl", "hang-rank0.json", "x.csv"])
def test_report_refuses_to_write_over_or_into_the_runs_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """``report RUN -o RUN/<a record file>`` exits 2 naming the file, and every file of the
    run keeps its bytes; a report beside them (``RUN/report.html``) is written."""
    run = _journal(tmp_path)
    (run / "hang-rank0.json").write_text('{"rank": 0}')
    before = _snapshot(run)
    assert main(["report", str(run), "-o", str(run / name)]) == 2
    err = capsys.readouterr().err
    assert str((run / name).resolve()) in err and "nothing was written" in err
    assert _snapshot(run) == before
    assert main(["report", str(run), "-o", str(run / "report.html")]) == 0
    assert (run / "report.html").read_bytes().startswith(b"<!DOCTYPE html>")


def test_report_refuses_a_symlink_to_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output that is a symlink elsewhere pointing at the journal is refused as well."""
    run = _journal(tmp_path)
    link = tmp_path / "out.html"
    link.symlink_to(run / "metrics.jsonl")
    before = _snapshot(run)
    assert main(["report", str(run), "-o", str(link)]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err
    assert _snapshot(run) == before


def test_report_refuses_to_write_over_an_event_file_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TensorBoard run: ``-o`` one of its event files exits 2, the file unchanged."""
    config = {
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(tmp_path), "job_name": "tb"},
    }
    with trainmon.Monitor(config) as monitor:
        monitor.log({"loss": 1.0}, step=1)
    (event,) = (tmp_path / "tb").glob("*tfevents*")
    before = event.read_bytes()
    assert main(["report", str(tmp_path / "tb"), "-o", str(event)]) == 2
    assert event.name in capsys.readouterr().err
    assert event.read_bytes() == before


@pytest.mark.parametrize("backend", ["tensorboard", "csv"])
def test_sync_refuses_the_runs_own_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    """``sync --to tensorboard|csv DIR`` where ``DIR/<job>`` is the run's own folder exits 2
    and leaves every file of the run as it was."""
    run = _journal(tmp_path)
    before = _snapshot(tmp_path)
    assert main(["sync", str(run), "--to", backend, str(tmp_path)]) == 2
    assert "the run's own folder" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_two_runs_of_one_name_never_share_a_tensorboard_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs with the same job name synced to one TensorBoard folder: the second is refused
    (exit 2, naming the run there and ``--name``), the first's files stay whole; with
    ``--name`` it is written beside, each folder showing its own run in TensorBoard."""
    first = _journal(tmp_path / "a", steps=30, offset=0.0)
    second = _journal(tmp_path / "b", steps=20, offset=1000.0)
    shared = tmp_path / "shared" / "tb"
    assert main(["sync", str(first), "--to", "tensorboard", str(shared)]) == 0
    capsys.readouterr()
    before = _snapshot(shared)
    assert main(["sync", str(second), "--to", "tensorboard", str(shared)]) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and "--name" in err and str(first) in err
    assert _snapshot(shared) == before
    assert main(["sync", str(second), "--to", "tensorboard", str(shared), "--name", "job-b"]) == 0
    assert _accumulated_loss(shared / "job") == [(s, float(s)) for s in range(1, 31)]
    assert _raw_loss(shared / "job") == [(s, float(s)) for s in range(1, 31)]
    assert _raw_loss(shared / "job-b") == [(s, 1000.0 + s) for s in range(1, 21)]


def test_two_runs_of_one_name_never_mix_in_a_csv_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Synced as CSV, a second run of the same name is refused (the first's ``loss.csv``
    keeps its rows), and a folder holding CSV files no sync wrote is refused too."""
    first = _journal(tmp_path / "a", steps=30)
    second = _journal(tmp_path / "b", steps=20, offset=1000.0)
    shared = tmp_path / "csv"
    assert main(["sync", str(first), "--to", "csv", str(shared)]) == 0
    assert main(["sync", str(first), "--to", "csv", str(shared)]) == 0  # its own: again
    capsys.readouterr()
    assert main(["sync", str(second), "--to", "csv", str(shared)]) == 2
    assert "holds another run" in capsys.readouterr().err
    assert _csv_rows(shared / "job" / "loss.csv") == [(s, float(s)) for s in range(1, 31)]
    (tmp_path / "live" / "job").mkdir(parents=True)
    (tmp_path / "live" / "job" / "loss.csv").write_text("step,loss\n1,5.0\n")
    assert main(["sync", str(second), "--to", "csv", str(tmp_path / "live")]) == 2
    assert "no sync of this run wrote (loss.csv)" in capsys.readouterr().err
    assert (tmp_path / "live" / "job" / "loss.csv").read_text() == "step,loss\n1,5.0\n"
    assert main(["sync", str(second), "--to", "csv", str(shared), "--name", "job-b"]) == 0
    assert _csv_rows(shared / "job-b" / "loss.csv") == [(s, 1000.0 + s) for s in range(1, 21)]


_KILL_AT = """
import os, sys
import trainmon.cli.sync_places as places
from trainmon.cli import main

calls = {"n": 0}
original = os.replace

def replace(*args, **kwargs):
    calls["n"] += 1
    if calls["n"] == int(sys.argv[1]):
        os._exit(137)  # as kill -9 would leave it: no cleanup runs
    return original(*args, **kwargs)

places.os.replace = replace  # type: ignore[attr-defined]
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("kill_at", [1, 2, 3, 4])
def test_a_sync_killed_at_any_point_of_its_commit_leaves_one_copy_after_a_rerun(
    tmp_path: Path, kill_at: int
) -> None:
    """A TensorBoard sync killed at each file move of its commit (manifest, each event file,
    the last manifest): after a rerun the folder holds each step once, read by a reader that
    does not purge, and TensorBoard's own reader agrees."""
    run = _journal(tmp_path / "runs", steps=50)
    out = tmp_path / "tb"
    argv = ["sync", str(run), "--to", "tensorboard", str(out)]
    assert main(argv) == 0  # an earlier sync: the killed one replaces it
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_AT, str(kill_at), *argv], capture_output=True, text=True
    )
    assert killed.returncode == 137, killed.stderr
    assert main(argv) == 0
    assert _raw_loss(out / "job") == [(s, float(s)) for s in range(1, 51)]
    assert _accumulated_loss(out / "job") == [(s, float(s)) for s in range(1, 51)]
    assert not list(out.glob(".*trainmon-sync"))  # no staging folder left behind


@pytest.mark.slow
def test_a_sync_killed_with_sigkill_while_writing_leaves_one_copy_after_a_rerun(
    tmp_path: Path,
) -> None:
    """kill -9 of a real ``trainmon sync`` subprocess while it writes 60,000 steps: the rerun
    leaves each step once in the folder (counted without purging), nothing half-written."""
    steps = 60_000
    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    lines = [b'{"v":1,"kind":"meta","time":1.0,"job":"job","pid":1,"host":"h","attempt":"a"}']
    lines += [
        b'{"v":1,"kind":"scalars","step":%d,"time":%d.0,"values":{"loss":%d.0}}' % (s, s, s)
        for s in range(1, steps + 1)
    ]
    (run / "metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "tb"
    command = [sys.executable, "-m", "trainmon", "sync", str(run), "--to", "tensorboard", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    staging = out / ".job.trainmon-sync"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        files = list(staging.glob("*tfevents*")) if staging.is_dir() else []
        if sum(p.stat().st_size for p in files) > 200_000:
            break
        time.sleep(0.01)
    assert process.poll() is None, "the sync ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert subprocess.run(command, capture_output=True).returncode == 0
    found: Any = _raw_loss(out / "job")
    assert len(found) == steps and [s for s, _ in found] == list(range(1, steps + 1))
    assert not staging.exists()
