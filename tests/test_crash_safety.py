"""What a real training process leaves on disk when it is stopped: SIGTERM, a normal exit without
``close()``, ``kill -9``, and a restart into the same folder. Each test runs a child process."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainmon import read_journal

pytestmark = pytest.mark.slow

FOREVER = 10**9

# argv: output_path, flush_interval_s, first step, number of steps. Logs two metrics per step,
# prints "logged <step> <time>" after each, and ends without calling close().
CHILD = r"""
import sys, time
import trainmon

out, flush_s, start, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
section = {"enabled": True, "output_path": out, "job_name": "run"}
monitor = trainmon.Monitor({
    "tensorboard": section, "csv_monitor": section, "jsonl": section,
    "console": {"enabled": False},
    "trainmon": {"flush_interval_s": flush_s},
})
for step in range(start, start + count):
    monitor.log({"train/loss": 1.0 + step * 0.25, "train/lr": float(step)}, step=step)
    print(f"logged {step} {time.time()!r}", flush=True)
    time.sleep(0.002)
"""

METRICS = {"train/loss": lambda step: 1.0 + step * 0.25, "train/lr": float}
CSV_FILES = {"train/loss": ("train_loss.csv", "loss"), "train/lr": ("train_lr.csv", "lr")}
_LOGGED = re.compile(r"logged (\d+) (\S+)")
_CSV_ROW = re.compile(r"-?\d+,[^,\n]+")


class Child:
    """The training process under test, with what it reported on stdout."""

    def __init__(self, out: Path, flush_s: float, start: int = 0, count: int = FOREVER) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(out), str(flush_s), str(start), str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.logged: list[tuple[int, float]] = []  # (step, time.time() right after logging it)

    def _take(self, line: str) -> None:
        match = _LOGGED.fullmatch(line.strip())
        if match:
            self.logged.append((int(match[1]), float(match[2])))

    def read_until(self, done: Any, timeout: float = 120.0) -> None:
        """Read progress lines until ``done(self)`` is true."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while not done(self):
            line = self.proc.stdout.readline()
            if not line:
                _, err = self.proc.communicate(timeout=60)
                pytest.fail(f"child ended early (rc {self.proc.returncode}):\n{err}")
            self._take(line)
            assert time.monotonic() < deadline, "child made no progress"

    def finish(self, timeout: float = 120.0) -> str:
        """Wait for the process to end; returns its stderr."""
        out, err = self.proc.communicate(timeout=timeout)
        for line in out.splitlines():
            self._take(line)
        return err

    @property
    def last_step(self) -> int:
        return self.logged[-1][0]

    def running_for(self) -> float:
        return self.logged[-1][1] - self.logged[0][1] if self.logged else 0.0


# ---- reading every output back --------------------------------------------------------------


def _journal(run: Path) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {name: [] for name in METRICS}
    for record in read_journal(run):
        if record.get("kind") == "scalars":
            for name in METRICS:
                if name in record["values"]:
                    series[name].append((record["step"], record["values"][name]))
    return series


def _csv(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Each metric's CSV rows; every line must be complete: one header, then ``int,float``."""
    series = {}
    for name, (file_name, header) in CSV_FILES.items():
        text = (run / file_name).read_text()
        assert text.endswith("\n"), f"{file_name} is empty or ends mid-line"
        lines = text.splitlines()
        assert lines[0] == f"step,{header}"
        assert lines.count(f"step,{header}") == 1, f"{file_name} has more than one header"
        bad = [line for line in lines[1:] if not _CSV_ROW.fullmatch(line)]
        assert bad == [], f"{file_name} has malformed lines"
        with open(run / file_name, newline="") as f:
            rows = list(csv.reader(f))[1:]
        series[name] = [(int(step), float(value)) for step, value in rows]
    return series


def _tensorboard(run: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    return {
        name: [(e.step, e.value) for e in acc.Scalars(name)] if name in tags else []
        for name in METRICS
    }


def _outputs(run: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    return {"jsonl": _journal(run), "csv": _csv(run), "tensorboard": _tensorboard(run)}


def _assert_runs(
    outputs: dict[str, dict[str, list[tuple[int, float]]]],
    runs: list[tuple[int, int, int]],
) -> None:
    """Each output holds, per metric, consecutive steps from each run's first step, in order and
    with the right values; run ``(start, at_least, at_most)`` must reach ``at_least``."""
    for output, series in outputs.items():
        for name, value_of in METRICS.items():
            points = series[name]
            index = 0
            for start, at_least, at_most in runs:
                count = 0
                while index + count < len(points) and points[index + count][0] == start + count:
                    count += 1
                last = start + count - 1
                where = f"{output} {name}: the run from step {start}"
                assert at_least <= last <= at_most, f"{where} ends at {last}"
                wanted = [(step, value_of(step)) for step in range(start, start + count)]
                assert points[index : index + count] == wanted, where
                index += count
            assert index == len(points), f"{output} {name}: unexpected points {points[index:]}"


# ---- the tests -------------------------------------------------------------------------------


def test_sigterm_writes_every_logged_step_to_every_output(tmp_path: Path) -> None:
    """SIGTERM mid-run ends the process by that signal, and every step it had logged is in the
    journal, the CSV files and TensorBoard, although the writers' own flush interval never came."""
    child = Child(tmp_path, flush_s=600.0)
    child.read_until(lambda c: len(c.logged) > 0 and c.last_step >= 150)
    child.proc.send_signal(signal.SIGTERM)
    err = child.finish()

    assert child.proc.returncode == -signal.SIGTERM, err
    last = child.last_step
    _assert_runs(_outputs(tmp_path / "run"), [(0, last, last + 1)])


def test_normal_exit_without_close_flushes_everything_at_exit(tmp_path: Path) -> None:
    """A script that ends without calling close() still has every step in every output (the
    atexit hook writes them; the flush interval is far too long to have done it)."""
    child = Child(tmp_path, flush_s=600.0, count=300)
    err = child.finish()

    assert child.proc.returncode == 0, err
    assert child.last_step == 299
    _assert_runs(_outputs(tmp_path / "run"), [(0, 299, 299)])


def _kill_nine_after(child: Child, seconds: float) -> float:
    child.read_until(lambda c: c.running_for() >= seconds)
    killed_at = time.time()
    os.kill(child.proc.pid, signal.SIGKILL)
    child.finish()
    assert child.proc.returncode == -signal.SIGKILL
    return killed_at


def _logged_before(child: Child, moment: float) -> int:
    return max(step for step, at in child.logged if at <= moment)


def test_kill_nine_leaves_parseable_files_missing_only_the_last_moments(tmp_path: Path) -> None:
    """After kill -9 with flush_interval_s=0.2, every file still parses completely and each output
    holds a prefix of the logged steps that includes everything logged 1.5 s before the kill."""
    child = Child(tmp_path, flush_s=0.2)
    killed_at = _kill_nine_after(child, 3.0)

    must_have = _logged_before(child, killed_at - 1.5)
    assert must_have > 0
    outputs = _outputs(tmp_path / "run")  # parses every file, line by line for CSV
    _assert_runs(outputs, [(0, must_have, child.last_step + 1)])


def test_restart_after_kill_nine_appends_to_the_same_files(tmp_path: Path) -> None:
    """A run restarted into the folder of a kill -9'd run appends: the CSV files keep exactly one
    header, the journal stays parseable with one meta record per process, and no step is lost
    from either run beyond the killed run's last moments."""
    first = Child(tmp_path, flush_s=0.2)
    killed_at = _kill_nine_after(first, 2.0)
    must_have = _logged_before(first, killed_at - 1.5)

    second = Child(tmp_path, flush_s=0.2, start=100_000, count=50)
    err = second.finish()
    assert second.proc.returncode == 0, err

    run = tmp_path / "run"
    metas = [r for r in read_journal(run) if r.get("kind") == "meta"]
    assert [m["pid"] for m in metas] == [first.proc.pid, second.proc.pid]
    outputs = _outputs(run)  # includes: exactly one header line per CSV file
    _assert_runs(outputs, [(0, must_have, first.last_step + 1), (100_000, 100_049, 100_049)])
