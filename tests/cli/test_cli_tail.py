"""`trainmon tail`: the console's window lines and the alerts, also while a run is writing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainmon
from trainmon.alerts import Alert
from trainmon.cli import main


def monitored_run(folder: Path, steps: int) -> None:
    """A run with the console writer on (to stdout) and the journal, 10 steps per window."""
    config = {
        "steps_per_print": 10,
        "jsonl": {"enabled": True, "output_path": str(folder), "job_name": "job"},
        "console": {"enabled": True},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, steps + 1):
            monitor.step = step
            monitor.write_events(
                [
                    ("train/loss", 1.0 / step),
                    ("train/lr", 1e-3),
                    ("perf/step_time_ms", 30.0 + step % 4),
                    ("perf/forward_ms", 10.0),
                    ("perf/samples_per_sec", 2000.0 + step),
                    ("mem/rss_mb", 500.0),
                ]
            )


def test_tail_prints_the_same_lines_the_console_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Window lines rebuilt from the journal equal the console writer's lines, last N first."""
    monitored_run(tmp_path, 45)
    console = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(console) == 5  # windows ending at 10, 20, 30, 40 and the partial one at 45
    assert main(["tail", str(tmp_path / "job"), "-n", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == console
    assert main(["tail", str(tmp_path / "job"), "-n", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == console[-2:]


def test_tail_shows_alerts_in_time_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines of alerts.jsonl appear among the windows, marked ALERT, with rule and message."""
    monitored_run(tmp_path, 20)
    capsys.readouterr()
    alert = Alert(
        rule="slow",
        kind="threshold",
        state="firing",
        message="step time 40 > 35",
        step=12,
        time=time.time() + 3600,
    )
    (tmp_path / "job" / "alerts.jsonl").write_text(json.dumps(alert.as_dict()) + "\n")
    assert main(["tail", str(tmp_path / "job")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[-1].startswith("ALERT ") and "step 12  firing  slow: step time 40 > 35" in lines[-1]
    )
    assert lines[0].startswith("step 10 |")


def test_tail_of_a_tensorboard_folder_says_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder with only event files: exit 1 and a message pointing at summary/report."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 1)
    writer.close()
    assert main(["tail", str(tmp_path / "tb")]) == 1
    err = capsys.readouterr().err
    assert "no trainmon journal" in err and "trainmon summary" in err


def window_line(step: int, loss: float) -> bytes:
    """One journal window record (as JsonlWriter writes it) for the window ending at step."""
    record = {
        "v": 1,
        "kind": "window",
        "first_step": step - 9,
        "last_step": step,
        "start_time": 1.0,
        "end_time": 2.0 + step,
        "stats": {
            "train/loss": {"count": 10, "mean": loss, "min": loss, "max": loss, "last": loss}
        },
    }
    return (json.dumps(record) + "\n").encode()


def read_line(process: subprocess.Popen[bytes], timeout: float = 20.0) -> str:
    """The next stdout line of a child, or fail after ``timeout`` seconds."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stdout.fileno(), False)
    buffer = b""
    while time.monotonic() < deadline:
        chunk = process.stdout.read(1)
        if chunk:
            buffer += chunk
            if chunk == b"\n":
                return buffer.decode()
        else:
            time.sleep(0.02)
    raise AssertionError(f"no line within {timeout} s (got {buffer!r})")


@pytest.mark.slow
def test_follow_prints_new_windows_and_alerts_and_exits_0_on_ctrl_c(tmp_path: Path) -> None:
    """-f waits for the journal, prints a window once its line is complete (a half-written
    line is held back), reads again from the start after truncation, prints new alerts,
    and exits 0 on SIGINT."""
    folder = tmp_path / "live"
    folder.mkdir()
    journal = folder / "metrics.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "tail", str(folder), "-f", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a suite started in the background by a shell without job control inherits SIGINT
        # ignored, and Python then never raises KeyboardInterrupt: give the child the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(0.3)
        line = window_line(10, 2.5)
        with open(journal, "ab") as f:
            f.write(line[:25])  # a half-written line: nothing yet
            f.flush()
            time.sleep(0.3)
            f.write(line[25:])
        assert read_line(process).startswith("step 10 | loss 2.5")
        with open(journal, "ab") as f:
            f.write(window_line(20, 1.25))
        assert read_line(process).startswith("step 20 | loss 1.25")
        journal.write_bytes(window_line(10, 9.0))  # truncated and rewritten (a new run)
        assert read_line(process).startswith("step 10 | loss 9")
        alert = {
            "rule": "nan",
            "state": "firing",
            "message": "loss is NaN",
            "step": 11,
            "time": 5.0,
        }
        (folder / "alerts.jsonl").write_text(json.dumps(alert) + "\n")
        assert read_line(process).startswith("ALERT ")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert process.stderr is not None
        assert b"Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.slow
def test_follow_waits_for_a_run_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    """-f on a run whose folder (and its parent) does not exist yet waits for it, says so once,
    then prints the windows of the run once it starts writing."""
    folder = tmp_path / "runs" / "job"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "tail", str(folder), "-f", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(0.5)
        assert process.poll() is None, "tail -f gave up on a folder that is not there yet"
        monitored_run(tmp_path / "runs", 20)
        assert read_line(process).startswith("step 10 |")
        assert read_line(process).startswith("step 20 |")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert process.stderr is not None
        err = process.stderr.read().decode()
        assert err.count("waiting for") == 1, err
        assert "no such" not in err.lower()
    finally:
        if process.poll() is None:
            process.kill()
