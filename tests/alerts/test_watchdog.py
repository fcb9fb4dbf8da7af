"""The stall watchdog: when it fires, what the stack file shows, and a real stuck process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.alerts.watchdog import StallWatchdog
from trainmon.config import AlertRuleConfig
from trainmon.core.alert import Alert

WORKER = Path(__file__).resolve().parent.parent / "scripts" / "stall_worker.py"


def stall_rule(**keys: Any) -> AlertRuleConfig:
    """A checked stall rule."""
    keys = {"name": "hang", "kind": "stall", **keys}
    return trainmon.load_config({"alerts": {"rules": [keys]}}).alerts.rule_configs()[0]


class Loop:
    """A pretend training loop: a step counter, an event counter and a clock moved by hand."""

    def __init__(self) -> None:
        self.step = 0
        self.events = 0
        self.now = 100.0
        self.sent: list[Alert] = []
        self.metrics: list[tuple[str, float, int]] = []

    def progress(self) -> tuple[int, int]:
        return self.step, self.events

    def clock(self) -> float:
        return self.now

    def write_metric(self, name: str, value: float, step: int) -> None:
        self.events += 1  # like Monitor.write_events: the watchdog's own event is queued
        self.metrics.append((name, value, step))

    def watchdog(self, rule: AlertRuleConfig, folder: Path) -> StallWatchdog:
        return StallWatchdog(
            [rule],
            progress=self.progress,
            stack_dir=folder,
            send=lambda alert, _: self.sent.append(alert),
            write_metric=self.write_metric,
            clock=self.clock,
            poll_s=0.01,
        )

    def run_steps(self, dog: StallWatchdog, count: int, interval_s: float) -> None:
        for _ in range(count):
            self.step += 1
            self.events += 2
            self.now += interval_s
            dog.check()


def test_fires_after_seconds_repeats_after_cooldown_and_resolves(tmp_path: Path) -> None:
    """No alert before the first step; after 5 s without a step one critical alert names the
    stack file, it repeats after the cool-down, and the next step resolves it."""
    loop = Loop()
    dog = loop.watchdog(stall_rule(seconds=5, cooldown_s=60, severity="critical"), tmp_path)
    loop.now += 1000
    dog.check()
    assert loop.sent == []  # not armed before the first step: start-up is not a stall
    loop.run_steps(dog, 3, 1.0)
    loop.now += 4.5
    dog.check()
    assert loop.sent == []
    loop.now += 0.5
    dog.check()
    loop.now += 30
    dog.check()
    loop.now += 30
    dog.check()
    loop.run_steps(dog, 1, 0.5)
    assert [(a.state, a.step) for a in loop.sent] == [
        ("firing", 3),
        ("firing", 3),
        ("resolved", 4),
    ]
    firing = loop.sent[0]
    stack_file = Path(firing.details["stack_file"])
    assert stack_file.parent == tmp_path and re.fullmatch(
        r"stacks-rank0-\d{8}-\d{6}\.txt", stack_file.name
    )
    where = "test_fires_after_seconds_repeats_after_cooldown_and_resolves (test_watchdog.py:82)"
    assert firing.message == (
        f"no training step on rank 0 for 5 s (last step 3, limit 5 s); "
        f"stacks of every thread in {stack_file}; verdict: rank 0 is at step 3 in {where}"
    )  # the watchdog's "training thread" is the test's, stuck in its dog.check() at line 82
    assert firing.severity == "critical" and firing.kind == "stall"
    assert loop.sent[1].details["repeat"] == 1
    assert (
        loop.sent[2].message
        == "training steps resumed on rank 0 at step 4 after 65.5 s without one"
    )
    assert loop.metrics == [("alerts/hang", 1.0, 3), ("alerts/hang", 0.0, 4)]
    # one stack file per stall, and the rank's hang record
    assert sorted(tmp_path.iterdir()) == sorted([stack_file, tmp_path / "hang-rank0.json"])


def test_multiple_of_the_median_step_interval(tmp_path: Path) -> None:
    """With "multiple": 5 and steps every 0.2 s the limit is 1 s, known only after 5 steps;
    with "seconds" as well, the longer of the two applies."""
    loop = Loop()
    dog = loop.watchdog(stall_rule(multiple=5), tmp_path)
    loop.run_steps(dog, 4, 0.2)
    loop.now += 10
    dog.check()
    assert loop.sent == []  # 3 intervals seen: too few to know what is normal
    loop.run_steps(dog, 6, 0.2)
    assert dog.limit_s(dog.rules[0].rule) == pytest.approx(1.0)
    loop.now += 0.99
    dog.check()
    assert loop.sent == []
    loop.now += 0.02
    dog.check()
    assert [(a.state, a.step) for a in loop.sent] == [("firing", 10)]
    assert loop.sent[0].details["median_step_interval_s"] == pytest.approx(0.2)
    both = loop.watchdog(stall_rule(multiple=5, seconds=3), tmp_path)
    loop.run_steps(both, 10, 0.2)
    assert both.limit_s(both.rules[0].rule) == 3


def test_logging_alone_does_not_hide_a_stuck_step(tmp_path: Path) -> None:
    """Once monitor.step moves with the steps, events from another thread (a sampler that
    keeps logging) are not progress; a loop that never sets monitor.step progresses with
    its logging calls."""
    loop = Loop()
    dog = loop.watchdog(stall_rule(seconds=5), tmp_path)
    loop.run_steps(dog, 3, 1.0)
    for _ in range(10):
        loop.events += 1
        loop.now += 1
        dog.check()
    assert [(a.state, a.step) for a in loop.sent] == [("firing", 3)]
    logs_only = Loop()
    dog = logs_only.watchdog(stall_rule(seconds=5), tmp_path)
    for _ in range(10):
        logs_only.events += 1
        logs_only.now += 1
        dog.check()
    assert logs_only.sent == []


def _stuck_in_sleep(steps: list[int], seconds: float) -> None:
    """A training loop that steps, then blocks in a C call."""
    for _ in range(5):
        steps[0] += 1
        time.sleep(0.01)
    time.sleep(seconds)  # STUCK HERE
    steps[0] += 1


def test_stack_file_names_the_frame_blocked_in_a_c_call(tmp_path: Path) -> None:
    """A thread stuck in time.sleep is caught: the stack file names its function and line,
    and the thread's name."""
    steps = [0]
    sent: list[Alert] = []
    dog = StallWatchdog(
        [stall_rule(seconds=0.3)],
        progress=lambda: (steps[0], 0),
        stack_dir=tmp_path,
        send=lambda alert, _: sent.append(alert),
    )
    worker = threading.Thread(target=_stuck_in_sleep, args=(steps, 1.0), name="fake-training")
    dog.start()
    worker.start()
    worker.join()
    time.sleep(0.1)
    dog.stop()
    assert [a.state for a in sent] == ["firing", "resolved"]
    text = Path(sent[0].details["stack_file"]).read_text()
    line = next(
        n for n, src in enumerate(Path(__file__).read_text().splitlines(), 1) if "STUCK HERE" in src
    )
    faulthandler_part = text.split("== thread names ==")[0]
    assert f'test_watchdog.py", line {line} in _stuck_in_sleep' in faulthandler_part
    assert "fake-training" in text
    assert "time.sleep(seconds)  # STUCK HERE" in text  # the Python part shows source lines


# ---- a real process stuck in its training loop --------------------------------------------


def run_worker(out: Path, mode: str, rank: int = 0) -> subprocess.CompletedProcess[str]:
    """Run stall_worker.py and return its finished process."""
    result = subprocess.run(
        [sys.executable, str(WORKER), str(out), mode, str(rank)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    return result


def worker_line(marker_function: str) -> int:
    """The line of stall_worker.py where ``marker_function`` blocks."""
    lines = WORKER.read_text().splitlines()
    start = next(n for n, src in enumerate(lines) if f"def {marker_function}(" in src)
    return next(n + 1 for n, src in enumerate(lines) if n > start and "must name this" in src)


def alerts_delivered(out: Path) -> list[dict[str, Any]]:
    """Alerts in the file sink's ``alerts.jsonl``."""
    lines = (out / "job" / "alerts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "function"), [("sleep", "block_in_sleep"), ("event", "block_on_event")]
)
def test_process_stuck_in_a_blocking_call_is_reported(
    tmp_path: Path, mode: str, function: str
) -> None:
    """A training loop stuck 2.5 s in time.sleep or Event.wait gets a stack file naming the
    blocking line, a critical stall alert pointing at it, a resolved alert when it resumes,
    and alerts/hang = 1 then 0 in the journal."""
    run_worker(tmp_path, mode)
    stacks = sorted((tmp_path / "job").glob("stacks-rank0-*.txt"))
    assert len(stacks) == 1
    text = stacks[0].read_text()
    assert f'stall_worker.py", line {worker_line(function)} in {function}' in text
    assert "MainThread" in text
    alerts = alerts_delivered(tmp_path)
    assert [a["state"] for a in alerts] == ["firing", "resolved"]
    assert str(stacks[0]) in alerts[0]["message"]
    assert "no training step on rank 0 for 0.5" in alerts[0]["message"]
    resumed = re.search(r"resumed on rank 0 at step (\d+) after 2\.\d+ s", alerts[1]["message"])
    # seen at the next poll: 21-23 on an idle machine, a step or two later on a loaded one
    assert resumed is not None and 21 <= int(resumed.group(1)) <= 26
    assert alerts[0]["severity"] == "critical"
    assert alerts[0]["details"]["stack_file"] == str(stacks[0])
    assert alerts[0]["step"] == 20
    hang = [
        (r["step"], r["values"]["alerts/hang"])
        for r in trainmon.read_journal(tmp_path / "job")
        if r["kind"] == "scalars" and "alerts/hang" in r["values"]
    ]
    assert hang == [(20, 1), (int(resumed.group(1)), 0)]


@pytest.mark.slow
def test_process_stall_by_multiple_of_median_step_interval(tmp_path: Path) -> None:
    """With only "multiple": 5 and 20 ms steps, a 2.5 s stall fires after about 0.1 s."""
    run_worker(tmp_path, "multiple")
    alerts = alerts_delivered(tmp_path)
    assert [a["state"] for a in alerts] == ["firing", "resolved"]
    details = alerts[0]["details"]
    assert 0.015 <= details["median_step_interval_s"] <= 0.06
    assert details["limit_s"] == pytest.approx(5 * details["median_step_interval_s"])
    assert details["seconds_since_step"] < 1.0


@pytest.mark.slow
def test_rank_that_does_not_write_dumps_stacks_and_logs_only(tmp_path: Path) -> None:
    """On rank 1 the watchdog writes stacks-rank1-*.txt in the run folder and logs the stall;
    nothing is delivered and no journal is written there."""
    result = run_worker(tmp_path, "sleep", rank=1)
    stacks = list((tmp_path / "job").glob("stacks-rank1-*.txt"))
    assert len(stacks) == 1 and "block_in_sleep" in stacks[0].read_text()
    logged = re.search(
        r"stall alert 'hang' firing: no training step on rank 1 for 0\.5\d* s "
        r"\(last step 20, limit 0\.5 s\); stacks of every thread in (\S+)",
        result.stderr,
    )
    assert logged is not None and logged.group(1) == str(stacks[0])
    assert "training steps resumed on rank 1" in result.stderr
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == [
        "hang-rank1.json",  # its hang record, next to its stacks (no journal, no alert file)
        stacks[0].name,
    ]
