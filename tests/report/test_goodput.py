"""Goodput and resume across attempts: a real run killed with SIGKILL after a checkpoint and
resumed into the same folder, with known sleeps, read back by `goodput`, `tail`, `summary`,
`compare` and `report`; and the journal records each attempt leaves."""

from __future__ import annotations

import json
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
from trainmon.journal import read_journal
from trainmon.report.attempts import read_attempts, restarts_of
from trainmon.report.goodput import BADPUT, measure
from trainmon.report.html import write_report
from trainmon.report.loading import load_run

WORKER = Path(__file__).parents[1] / "scripts" / "goodput_worker.py"
SRC = Path(__file__).parents[2] / "src"

STARTUP_S = 1.0  # each attempt sleeps this long between its Monitor's creation and step 1
STEP_S = 0.1  # each step sleeps this long
SAVE_AT, HANG_AT, TOTAL = 10, 16, 24  # run 1 saves at 10 and is killed after 16
GAP_S = 1.0  # the test waits this long after the kill before starting run 2
PRE_S = 1.5  # each process sleeps this long before it imports torch and trainmon
DRAIN_S = 0.2  # the workers' drain interval (their flushes are 30 s apart)


def _worker(out: Path, *args: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, str(WORKER), str(out), *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def _printed(lines: list[str], key: str) -> float:
    return next(float(line.split()[1]) for line in lines if line.startswith(key + " "))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run 1 (saves at step 10, SIGKILLed after step 16), a gap, run 2 (loads, trains to 24);
    the times each worker measured itself, and an uninterrupted run to compare against."""
    out = tmp_path_factory.mktemp("resumed")
    launched1 = time.time()
    first = _worker(out, 1, TOTAL, SAVE_AT, HANG_AT, STARTUP_S, STEP_S, PRE_S)
    assert first.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = first.stdout.readline()
        lines.append(line)
        if line.startswith("HANGING") or not line:
            break
    assert lines[-1].startswith("HANGING"), lines
    time.sleep(2 * DRAIN_S)  # a kill within one drain of step 16 may lose it (the bound)
    first.send_signal(signal.SIGKILL)
    killed = time.time()
    first.wait(30)
    assert first.returncode == -signal.SIGKILL
    time.sleep(GAP_S)
    launched2 = time.time()
    second = _worker(out, 2, TOTAL, 0, 0, STARTUP_S, STEP_S, PRE_S)
    text, _ = second.communicate(timeout=120)
    assert second.returncode == 0, text
    later = text.splitlines()
    plain = tmp_path_factory.mktemp("plain")
    third = _worker(plain, 1, TOTAL, 0, 0, 0.0, 0.0)
    third.communicate(timeout=120)
    assert third.returncode == 0
    return {
        "job": out / "job",
        "plain": plain / "job",
        "launched1": launched1,
        "launched2": launched2,
        "process1": _printed(lines, "PROCESS"),
        "process2": _printed(later, "PROCESS"),
        "before1": _printed(lines, "BEFORE"),
        "monitor1": _printed(lines, "MONITOR"),
        "hanging": _printed(lines, "HANGING"),
        "killed": killed,
        "save": _printed(lines, "SAVE"),
        "before2": _printed(later, "BEFORE"),
        "monitor2": _printed(later, "MONITOR"),
        "load": _printed(later, "LOAD"),
        "closed": _printed(later, "CLOSED"),
    }


@pytest.mark.slow
def test_goodput_splits_the_wall_time_as_the_test_measured_it(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`goodput --json` of the killed-and-resumed run, each process spending PRE_S before it
    imports trainmon: the wall time runs from the first process's start and matches the
    test's own clock (first launch to last close) within 5 %, the parts add up within 1 %,
    start-up holds both pre-import waits, and downtime is the gap plus at most one drain."""
    assert main(["goodput", str(resumed["job"]), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert list(figures) == ["wall_s", "productive_s", "goodput", "restarts", "badput", "attempts"]
    assert list(figures["badput"]) == list(BADPUT)
    badput = figures["badput"]
    measured_wall = resumed["closed"] - resumed["launched1"]
    parts = figures["productive_s"] + sum(badput.values())
    assert abs(parts - figures["wall_s"]) <= 0.01 * figures["wall_s"], (parts, figures)
    assert abs(figures["wall_s"] - measured_wall) <= 0.05 * measured_wall
    assert figures["goodput"] == pytest.approx(figures["productive_s"] / figures["wall_s"])
    assert figures["restarts"] == 1

    kept = TOTAL * STEP_S  # steps 1-10 of run 1 and 11-24 of run 2
    assert kept * 0.95 <= figures["productive_s"] <= kept * 1.6
    lost = (HANG_AT - SAVE_AT) * STEP_S  # steps 11-16 of run 1
    assert lost * 0.95 <= badput["lost_work_s"] <= lost * 1.6 + 0.2
    # each process's start-up: its interpreter, PRE_S, imports, the Monitor, then STARTUP_S;
    # the process starts between the test's launch and the worker's first print
    startup = badput["startup_s"]
    least = sum(resumed[f"monitor{i}"] - resumed[f"process{i}"] for i in (1, 2))
    most = sum(resumed[f"monitor{i}"] - resumed[f"launched{i}"] for i in (1, 2))
    assert least >= 2 * PRE_S
    assert least + 2 * STARTUP_S - 0.1 <= startup <= most + 2 * STARTUP_S + 0.3, (startup, most)
    # from the last sign of life (step 16's end; HANGING is printed right after it) to the
    # next process's start
    shortest = resumed["launched2"] - resumed["hanging"]
    longest = resumed["process2"] - resumed["hanging"] + 0.1
    assert shortest >= GAP_S
    assert shortest - 0.05 <= badput["downtime_s"] <= longest, (badput["downtime_s"], longest)
    assert 0 < badput["checkpoint_save_s"] <= resumed["save"] + 0.1
    assert badput["checkpoint_save_s"] >= resumed["save"] * 0.5
    assert 0 < badput["checkpoint_load_s"] <= resumed["load"] + 0.1
    for quiet in ("data_wait_s", "eval_s", "stall_s", "other_s"):
        assert badput[quiet] < 0.3, (quiet, badput)

    one, two = figures["attempts"]
    # killed two drains after step 16 with no flush in 30 s: the journal reached the OS at
    # each drain, so no finished step is missing
    assert (one["ended"], one["first_step"], one["last_step"], one["redone_steps"]) == (
        "killed",
        1,
        HANG_AT,
        HANG_AT - SAVE_AT,
    )
    assert (two["ended"], two["resumed_from_step"], two["first_step"], two["last_step"]) == (
        "closed",
        SAVE_AT,
        SAVE_AT + 1,
        TOTAL,
    )
    for attempt, process in ((one, resumed["process1"]), (two, resumed["process2"])):
        assert process - 1.0 < attempt["start"] <= process  # its process's start


@pytest.mark.slow
def test_goodput_prints_a_table_and_one_line_per_attempt(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The human form: goodput in the first line, a row per category, each attempt's steps
    and how it ended, and the restart's line."""
    assert main(["goodput", str(resumed["job"])]) == 0
    out = capsys.readouterr().out
    assert "(1 restart), goodput " in out.splitlines()[0]
    for key in ("productive", *BADPUT):
        assert f"  {key} " in out
    assert "6 step(s) redone" in out
    attempt_lines = [line for line in out.splitlines() if line.startswith("  #")]
    assert len(attempt_lines) == 2
    assert "steps 1–16" in attempt_lines[0] and "killed (last sign of life" in attempt_lines[0]
    assert "steps 11–24" in attempt_lines[1] and " closed " in attempt_lines[1]
    assert "resumed from step 10 · steps 11–16 of the previous attempt replaced" in out


@pytest.mark.slow
def test_a_run_without_restarts_has_no_lost_work_or_downtime(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """An uninterrupted run: 0 restarts, one closed attempt, nothing lost or down, and its
    parts still add up to its wall time."""
    assert main(["goodput", str(resumed["plain"]), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["restarts"] == 0
    assert [a["ended"] for a in figures["attempts"]] == ["closed"]
    assert figures["badput"]["lost_work_s"] == 0 and figures["badput"]["downtime_s"] == 0
    parts = figures["productive_s"] + sum(figures["badput"].values())
    assert parts == pytest.approx(figures["wall_s"])


@pytest.mark.slow
def test_tail_shows_a_line_at_the_restart(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`tail` shows the killed attempt's windows that survive (those the resume replaced are
    left out, as in summary), then the restart line, then the resumed attempt's windows."""
    assert main(["tail", str(resumed["job"]), "-n", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    restart = (
        "── restart: resumed from step 10 · steps 11–16 of the previous attempt replaced "
        "(the previous attempt was killed)"
    )
    assert restart in lines
    at = lines.index(restart)
    assert [line.split(" |")[0] for line in lines[:at]] == ["step 4", "step 8"]
    assert [line.split(" |")[0] for line in lines[at + 1 :]] == [
        "step 12",
        "step 16",
        "step 20",
        "step 24",
    ]


@pytest.mark.slow
def test_summary_and_compare_count_each_step_once_and_say_what_was_redone(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`summary` counts steps 1-24 once, says 1 restart, 6 steps redone and the goodput;
    `compare` against an uninterrupted run has the same step count and 1 vs 0 restarts."""
    assert main(["summary", str(resumed["job"]), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["steps"], figures["first_step"], figures["last_step"]) == (TOTAL, 1, TOTAL)
    restarts = figures["restarts"]
    assert (restarts["restarts"], restarts["redone_steps"]) == (1, HANG_AT - SAVE_AT)
    assert 0 < restarts["goodput"] < 1
    assert main(["summary", str(resumed["job"])]) == 0
    text = capsys.readouterr().out
    assert "restarts       1 · 6 step(s) redone" in text
    assert (
        "attempt 2    resumed from step 10 · steps 11–16 of the previous attempt replaced" in text
    )

    assert main(["compare", str(resumed["job"]), str(resumed["plain"]), "--json"]) == 0
    rows = {r["label"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert (rows["steps"]["a"], rows["steps"]["b"]) == (TOTAL, TOTAL)
    assert (rows["restarts"]["a"], rows["restarts"]["b"]) == (1, 0)
    assert (rows["steps redone"]["a"], rows["steps redone"]["b"]) == (6, 0)
    assert 0 < rows["goodput"]["a"] < 100 and rows["goodput"]["b"] is None


@pytest.mark.slow
def test_the_report_stacks_each_attempts_time(resumed: dict[str, Any], tmp_path: Path) -> None:
    """The report has a goodput section with one bar per attempt: the killed attempt's bar
    holds the lost work, the resumed one's the checkpoint load and the downtime before it."""
    page = write_report([load_run(resumed["job"])], tmp_path / "r.html").read_text()
    section = page[page.index('<section id="goodput">') :]
    section = section[: section.index("</section>")]
    bars = section.split('<text x="0"')[1:]
    assert len(bars) == 2
    assert "attempt 1 (killed)" in bars[0] and 'data-category="lost_work_s"' in bars[0]
    assert 'data-category="checkpoint_load_s"' in bars[1]
    assert 'data-category="downtime_s"' in bars[1]
    assert "steps 11–16 of the previous attempt replaced" in section


# ---- the journal records of an attempt ---------------------------------------------------


def _config(base: Path, **extra: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        **extra,
    }


def test_an_attempt_stopped_by_a_rule_says_so(tmp_path: Path) -> None:
    """A run that an alert asked to stop ends with an ``end`` record naming the reason, and
    reads as "stopped by a rule"; a closed one as "closed"."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log({"train/loss": 1.0}, step=1)
    monitor = trainmon.Monitor(_config(tmp_path))
    monitor.log({"train/loss": 2.0}, step=2)
    monitor.request_stop("loss_nan: train/loss is NaN")
    monitor.close("aborted")
    ends = [r for r in read_journal(tmp_path / "job") if r["kind"] == "end"]
    assert [(e["status"], e["stop_reason"]) for e in ends] == [
        ("success", None),
        ("aborted", "loss_nan: train/loss is NaN"),
    ]
    first, second = read_attempts(tmp_path / "job")
    assert (first.ended, second.ended) == ("closed", "stopped by a rule")
    assert first.id != second.id and len(first.id) == 12


def test_an_idle_attempt_leaves_heartbeats(tmp_path: Path) -> None:
    """With nothing logged, flushes still write ``heartbeat`` lines, so an attempt's last
    sign of life follows the clock (here within 1.5 s of a 2.5 s idle wait)."""
    config = _config(tmp_path, trainmon={"flush_interval_s": 0.1})
    monitor = trainmon.Monitor(config)
    began = time.time()
    time.sleep(2.5)
    waited = time.time()
    monitor.flush()
    beats = [r["time"] for r in read_journal(tmp_path / "job") if r["kind"] == "heartbeat"]
    monitor.close()
    assert len(beats) >= 1
    assert waited - 1.5 <= max(beats) <= waited + 0.5
    (attempt,) = read_attempts(tmp_path / "job")
    assert attempt.last_seen >= began + 1.0


def test_a_restart_from_scratch_redoes_every_earlier_step(tmp_path: Path) -> None:
    """A second attempt that starts again at step 1 without loading a checkpoint makes all of
    the first attempt's steps redone work, and is described as a restart from scratch."""
    for steps in (5, 3):
        with trainmon.Monitor(_config(tmp_path)) as monitor:
            for step in range(1, steps + 1):
                monitor.log({"train/loss": 1.0, "perf/step_time_ms": 10.0}, step=step)
                time.sleep(0.01)
    attempts = read_attempts(tmp_path / "job")
    assert [len(a.redone) for a in attempts] == [5, 0]
    (restart,) = restarts_of(attempts)
    assert (
        restart.describe() == "restarted from scratch · steps 1–5 of the previous attempt replaced"
    )
    result = measure(attempts)
    assert result.restarts == 1 and result.redone_steps == 5
    assert result.productive_s + sum(result.badput.values()) == pytest.approx(result.wall_s)


def test_a_span_of_an_unknown_kind_is_refused_by_name(tmp_path: Path) -> None:
    """``Monitor.span`` names the kind it got and the kinds it takes."""
    monitor = trainmon.Monitor(_config(tmp_path))
    with pytest.raises(ValueError, match=r"'lunch'.*checkpoint_save, checkpoint_load, eval"):
        monitor.span("lunch")
    monitor.close()


def test_a_step_during_a_stall_alert_counts_as_stall_beyond_the_usual_step(
    tmp_path: Path,
) -> None:
    """A 1.2 s step among 50 ms steps, during which a stall rule (any name, alerts.jsonl from
    the file sink) fired: about 1.15 s of it is stall_s, the rest of the steps productive."""
    config = _config(
        tmp_path,
        alerts={
            "rules": [{"name": "hang", "kind": "stall", "seconds": 0.4}],
            "sinks": [{"type": "file"}],
        },
    )
    began = time.time()
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 11):
            sleep = 1.2 if step == 6 else 0.05
            started = time.time()
            time.sleep(sleep)
            monitor.step = step
            monitor.log({"perf/step_time_ms": (time.time() - started) * 1e3})
    ended = time.time()
    result = measure(read_attempts(tmp_path / "job"))
    assert 1.0 <= result.badput["stall_s"] <= 1.3, result.badput
    assert 0.35 <= result.productive_s <= 0.8
    assert result.wall_s <= ended - began + 0.1


def test_goodput_of_a_folder_without_a_journal_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder with no journal (a TensorBoard-only run) exits 1 with one line naming it."""
    assert main(["goodput", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"trainmon goodput: {tmp_path}: no trainmon journal (metrics.jsonl) there\n"


def test_three_attempts_each_step_kept_once_and_each_restart_described(tmp_path: Path) -> None:
    """Attempts logging steps 1-6, then 5-8 (resumed from 4), then 7-10 (resumed from 6):
    steps 5-6 of the first and 7-8 of the second are redone, each restart names its own
    replaced steps, and summary's loader counts steps 1-10 once."""
    for first, last, resume_from in ((1, 6, None), (5, 8, 4), (7, 10, 6)):
        with trainmon.Monitor(_config(tmp_path)) as monitor:
            if resume_from is not None:
                monitor.load_state_dict(
                    {"format": "trainmon.monitor_state", "version": 1, "step": resume_from}
                )
            for step in range(first, last + 1):
                monitor.log({"train/loss": float(step), "perf/step_time_ms": 5.0}, step=step)
                time.sleep(0.005)
    attempts = read_attempts(tmp_path / "job")
    assert [[s.step for s in a.redone] for a in attempts] == [[5, 6], [7, 8], []]
    assert [r.describe() for r in restarts_of(attempts)] == [
        "resumed from step 4 · steps 5–6 of the previous attempt replaced",
        "resumed from step 6 · steps 7–8 of the previous attempt replaced",
    ]
    run = load_run(tmp_path / "job")
    assert run.step_count == 10
    loss = run.series["train/loss"]
    assert list(loss.steps) == list(range(1, 11))
    result = measure(attempts)
    assert (result.restarts, result.redone_steps) == (2, 4)


def test_the_data_part_of_kept_steps_is_data_wait(tmp_path: Path) -> None:
    """Steps that sleep 60 ms fetching data and 40 ms computing, logging the fetch as
    ``perf/data_ms`` as the breakdown does: data_wait_s is the fetches' time the test
    measured, productive the rest of the steps."""
    fetched = computed = 0.0
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        previous = time.perf_counter()
        for step in range(1, 11):
            time.sleep(0.06)
            data_end = time.perf_counter()
            time.sleep(0.04)
            end = time.perf_counter()
            fetched += data_end - previous
            computed += end - data_end
            monitor.step = step
            monitor.log(
                {
                    "perf/step_time_ms": (end - previous) * 1e3,
                    "perf/data_ms": (data_end - previous) * 1e3,
                }
            )
            previous = end
    result = measure(read_attempts(tmp_path / "job"))
    assert result.badput["data_wait_s"] == pytest.approx(fetched, rel=0.1)
    assert result.productive_s == pytest.approx(computed, rel=0.25, abs=0.05)


def test_goodput_skips_a_damaged_line_as_summary_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line in the middle of the journal that is not JSON: goodput, like summary, skips it,
    names the line in a note and still reads every step around it (exit 0)."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(1, 4):
            monitor.log({"train/loss": 1.0}, step=step)
    journal = tmp_path / "job" / "metrics.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    assert main(["goodput", str(tmp_path / "job"), "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 unreadable line(s) (first: line 2 of metrics.jsonl)" in captured.err
    attempts = json.loads(captured.out)["attempts"]
    assert [(a["first_step"], a["last_step"], a["steps"]) for a in attempts] == [(1, 3, 3)]
    assert main(["summary", str(tmp_path / "job")]) == 0
    assert "skipped 1 unreadable line(s)" in capsys.readouterr().out


def test_overlapping_spans_are_counted_once(tmp_path: Path) -> None:
    """An evaluation span and a save span that overlap by 0.1 s: the shared time is counted
    once (for the one that began first), so the parts still add up to the wall time."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(1, 4):
            time.sleep(0.05)
            monitor.log({"perf/step_time_ms": 50.0}, step=step)
        t = time.time()
        time.sleep(0.3)
        monitor.record_span("eval", t, t + 0.2)
        monitor.record_span("checkpoint_save", t + 0.1, t + 0.3)
    result = measure(read_attempts(tmp_path / "job"))
    assert result.badput["eval_s"] == pytest.approx(0.2, abs=0.01)
    assert result.badput["checkpoint_save_s"] == pytest.approx(0.1, abs=0.01)
    assert result.productive_s + sum(result.badput.values()) == pytest.approx(result.wall_s)


@pytest.mark.slow
def test_under_torchrun_the_clock_starts_with_the_launcher(tmp_path: Path) -> None:
    """A first-round torchrun worker's attempt starts when its launcher (the elastic agent)
    started, before the worker's own process: the launcher's start-up is the job's."""
    from conftest import torchrun

    launched = time.time()
    result = torchrun(
        Path(__file__).parents[1] / "scripts" / "launched_worker.py", 1, str(tmp_path)
    )
    worker = _printed(result.stdout.splitlines(), "PROCESS")
    (meta,) = [r for r in read_journal(tmp_path / "job") if r["kind"] == "meta"]
    assert launched - 0.05 <= meta["launcher_start"] < meta["process_start"] <= worker
    (attempt,) = read_attempts(tmp_path / "job")
    assert attempt.start == meta["launcher_start"]
