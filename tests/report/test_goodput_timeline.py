"""The goodput timeline: a real job of two attempts (a save, a restart from step 5, a load)
with known sleeps, drawn by `goodput --timeline` (text and JSON) and in the report's SVG, its
segments adding up to `measure`'s split per attempt."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.cli import goodput
from trainmon.report.attempts import read_attempts
from trainmon.report.goodput import Goodput, measure
from trainmon.report.html import write_report
from trainmon.report.loading import load_run
from trainmon.report.timeline import DEFAULT_BINS, Timeline, job_timeline, render_text

STARTUP_S = 0.3  # before attempt 1's first step
DATA_S, COMPUTE_S = 0.04, 0.03  # each step of attempt 1: its data wait, then its compute
SAVE_S = 0.15  # the checkpoint save after step 5
TAIL_S = 0.1  # after attempt 1's last step, before it closes
GAP_S = 0.4  # between the attempts: downtime
LOAD_S = 0.1  # attempt 2's checkpoint load
STEP_S = 0.05  # each step of attempt 2


def _config(base: Path, **extra: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        **extra,
    }


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Attempt 1 logs steps 1-10 (saving after step 5) and closes; after a gap, attempt 2
    loads step 5's state and logs steps 6-12: steps 6-10 of attempt 1 are lost work."""
    base = tmp_path_factory.mktemp("timeline")
    trainmon.mark_start()  # (this fixture runs before the per-test mark)
    time.sleep(STARTUP_S)
    with trainmon.Monitor(_config(base)) as monitor:
        previous = time.time()
        for step in range(1, 11):
            time.sleep(DATA_S)
            fetched = time.time()
            time.sleep(COMPUTE_S)
            end = time.time()
            monitor.step = step
            monitor.log(
                {
                    "perf/step_time_ms": (end - previous) * 1e3,
                    "perf/data_ms": (fetched - previous) * 1e3,
                }
            )
            previous = end
            if step == 5:
                state = monitor.state_dict()
                with monitor.span("checkpoint_save"):
                    time.sleep(SAVE_S)
                previous = time.time()
        time.sleep(TAIL_S)
    time.sleep(GAP_S)
    with trainmon.Monitor(_config(base)) as monitor:
        monitor.load_state_dict(state)
        with monitor.span("checkpoint_load"):
            time.sleep(LOAD_S)
        previous = time.time()
        for step in range(6, 13):
            time.sleep(STEP_S)
            end = time.time()
            monitor.step = step
            monitor.log({"perf/step_time_ms": (end - previous) * 1e3})
            previous = end
    return base / "job"


def _goodput(*argv: str) -> int:
    """`trainmon goodput` parsed with the arguments its module defines."""
    parser = argparse.ArgumentParser(prog="trainmon")
    goodput.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["goodput", *argv])
    return int(args.handler(args))


def _sums(row: list[tuple[str, float, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for category, start, end in row:
        out[category] = out.get(category, 0.0) + (end - start)
    return out


def _agree(timeline: Timeline, result: Goodput) -> None:
    """Per attempt and category, the segments' lengths are `measure`'s split within 1 %; the
    segments are ordered, contiguous and inside the job's wall time."""
    assert len(timeline.rows) == len(result.per_attempt)
    assert timeline.wall_s == pytest.approx(result.wall_s)
    for row, split in zip(timeline.rows, result.per_attempt, strict=True):
        sums = _sums(row)
        for category in set(split) | set(sums):
            expected = split.get(category, 0.0)
            assert sums.get(category, 0.0) == pytest.approx(expected, rel=0.01, abs=1e-9), (
                category,
                sums,
                split,
            )
        for before, after in itertools.pairwise(row):
            assert after.start == pytest.approx(before.end, abs=1e-9)
        for segment in row:
            assert segment.end > segment.start
            assert timeline.origin - 1e-9 <= segment.start
            assert segment.end <= timeline.origin + timeline.wall_s + 1e-9


def test_the_segments_add_up_to_measures_split_of_each_attempt(job: Path) -> None:
    """The timeline's seconds per attempt and category are `measure`'s per-attempt split."""
    attempts = read_attempts(job)
    result = measure(attempts)
    timeline = job_timeline(attempts)
    _agree(timeline, result)
    first, second = timeline.rows
    assert [s.category for s in second[:1]] == ["downtime_s"]
    assert second[0].start == pytest.approx(first[-1].end)
    assert second[0].end - second[0].start == pytest.approx(GAP_S, abs=0.1)
    assert "lost_work_s" in _sums(first) and "lost_work_s" not in _sums(second)


def test_goodput_timeline_prints_a_row_per_attempt_an_axis_and_a_legend(
    job: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`goodput --timeline` in a 100-column terminal prints the table, then one bar per
    attempt in letters: attempt 1 start-up, data wait and productive steps, the save and its
    lost work, attempt 2 down in the gap after it, then its load and productive steps."""
    monkeypatch.setenv("COLUMNS", "100")
    assert _goodput(str(job), "--timeline") == 0
    out = capsys.readouterr().out
    assert out.startswith("wall ")
    lines = out.splitlines()
    at = lines.index("timeline (wall time from the first attempt's start):")
    row1, row2, axis, *legend = lines[at + 1 :]
    assert row1.startswith("  #1  ") and row2.startswith("  #2  ")
    bar1, bar2 = row1[6:], row2[6:]
    assert len(bar1) == len(bar2) == 100 - 6 - 1
    assert re.fullmatch(r"S+[WP]*W[WP]*P[WP]*C+X+\.+ +", bar1), bar1
    assert re.fullmatch(r" +D+S*L+S*P+\.?", bar2), bar2
    # the downtime fills the gap: it starts where attempt 1's bar ends
    assert abs(len(bar1.rstrip()) - (len(bar2) - len(bar2.lstrip()))) <= 1
    assert axis.startswith("      0 s ") and axis.endswith(" s")
    total = float(axis.split()[-2])
    wall = measure(read_attempts(job)).wall_s
    assert total == pytest.approx(wall, rel=0.01)
    text = " ".join(legend)
    for entry in ("S start-up", "P productive", "C checkpoint save", "L checkpoint load"):
        assert entry in text
    for entry in ("X lost work", "D down", "W data wait", ". other"):
        assert entry in text
    assert "E eval" not in text and "H stall" not in text


def test_goodput_json_timeline_lists_ordered_contiguous_segments(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`goodput --json --timeline` adds "timeline": per attempt, ordered contiguous segments in
    seconds from the job's start, within its wall time, adding up to the attempt's seconds;
    without --timeline the key is absent."""
    assert _goodput(str(job), "--json") == 0
    assert "timeline" not in json.loads(capsys.readouterr().out)
    assert _goodput(str(job), "--json", "--timeline") == 0
    figures = json.loads(capsys.readouterr().out)
    timeline, attempts = figures["timeline"], figures["attempts"]
    assert len(timeline) == len(attempts) == 2
    wall = figures["wall_s"]
    assert timeline[0][0]["start"] == 0.0
    assert timeline[-1][-1]["end"] == pytest.approx(wall, abs=1e-5)
    for row, attempt in zip(timeline, attempts, strict=True):
        assert all(set(s) == {"category", "start", "end"} for s in row)
        assert all(0.0 <= s["start"] < s["end"] <= wall + 1e-5 for s in row)
        assert all(a["end"] == b["start"] for a, b in itertools.pairwise(row))
        sums = _sums([(s["category"], s["start"], s["end"]) for s in row])
        for category, seconds in attempt["seconds"].items():
            assert sums.get(category, 0.0) == pytest.approx(seconds, rel=0.01, abs=1e-5)
    assert timeline[1][0]["category"] == "downtime_s"
    assert timeline[1][0]["start"] == timeline[0][-1]["end"]


def test_the_report_draws_the_attempts_along_wall_time(job: Path, tmp_path: Path) -> None:
    """The report's goodput section has a timeline SVG with one row per attempt, rects whose
    x and width are their start and duration on one seconds scale (so each category's widths
    add up to `measure`'s split), a time axis and a legend."""
    page = write_report([load_run(job)], tmp_path / "r.html").read_text()
    section = page[page.index('<section id="goodput">') :]
    section = section[: section.index("</section>")]
    svg = re.search(r'<svg class="goodput-timeline"[^>]*data-scale="([\d.]+)">(.*?)</svg>', section)
    assert svg is not None
    scale, body = float(svg.group(1)), svg.group(2)
    rows = re.findall(r'<g class="attempt" data-attempt="(\d+)">(.*?)</g>', body)
    assert [index for index, _ in rows] == ["1", "2"]
    assert "attempt 1 (closed)" in rows[0][1] and "attempt 2 (closed)" in rows[1][1]
    rect = re.compile(
        r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)" height="18" fill="#[0-9a-f]{6}" '
        r'data-category="(\w+)" data-start="([\d.]+)" data-end="([\d.]+)">'
    )
    result = measure(read_attempts(job))
    for (_, row), split in zip(rows, result.per_attempt, strict=True):
        widths: dict[str, float] = {}
        for x, width, category, start, end in rect.findall(row):
            assert float(x) == pytest.approx(150 + float(start) * scale, abs=0.005)
            assert float(width) == pytest.approx((float(end) - float(start)) * scale, abs=0.005)
            widths[category] = widths.get(category, 0.0) + float(width)
        assert widths, row
        for category, seconds in split.items():
            assert widths.get(category, 0.0) / scale == pytest.approx(seconds, rel=0.01, abs=1e-4)
    assert 'data-category="lost_work_s"' in rows[0][1]
    assert 'data-category="downtime_s"' in rows[1][1]
    assert 'data-category="checkpoint_load_s"' in rows[1][1]
    assert ">0 s</text>" in body and ">1 s</text>" in body  # the axis's ticks
    legend = section[section.index("</svg>", section.index("goodput-timeline")) :]
    assert "lost work</span>" in legend and "down</span>" in legend


def test_a_long_run_gives_few_segments_that_still_add_up(tmp_path: Path) -> None:
    """20,000 steps each with a data wait pack into at most about two segments per bin of a
    thousandth of the wall time, with each category's seconds still `measure`'s."""
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(1, 20_001):
            monitor.step = step
            monitor.log({"perf/step_time_ms": 0.05, "perf/data_ms": 0.02})
    attempts = read_attempts(tmp_path / "job")
    timeline = job_timeline(attempts)
    (row,) = timeline.rows
    assert len(row) <= 2 * DEFAULT_BINS + 10
    _agree(timeline, measure(attempts))
    assert _sums(row)["data_wait_s"] > 0


def test_eval_stall_and_between_steps_fall_where_they_happened(tmp_path: Path) -> None:
    """An evaluation inside a step, a 0.8 s step during which a stall rule fired and steps
    that log time between steps: each shows up inside its step, and the sums still agree."""
    config = _config(
        tmp_path,
        alerts={
            "rules": [{"name": "hang", "kind": "stall", "seconds": 0.3}],
            "sinks": [{"type": "file"}],
        },
    )
    with trainmon.Monitor(config) as monitor:
        previous = time.time()
        for step in range(1, 9):
            if step == 3:
                with monitor.span("eval"):
                    time.sleep(0.1)
            time.sleep(0.8 if step == 6 else 0.04)
            end = time.time()
            monitor.step = step
            monitor.log({"perf/step_time_ms": (end - previous) * 1e3, "perf/between_steps_ms": 5.0})
            previous = end
    attempts = read_attempts(tmp_path / "job")
    result = measure(attempts)
    timeline = job_timeline(attempts, bins=0)  # nothing packed: each piece where it fell
    _agree(timeline, result)
    (row,) = timeline.rows
    (attempt,) = attempts
    eval_ = [s for s in row if s.category == "eval_s"]
    assert len(eval_) == 1 and eval_[0].end - eval_[0].start == pytest.approx(0.1, abs=0.02)
    step2, step3 = attempt.steps[1].time, attempt.steps[2].time
    assert step2 <= eval_[0].start < eval_[0].end <= step3
    stall = [s for s in row if s.category == "stall_s"]
    assert sum(s.end - s.start for s in stall) == pytest.approx(0.75, abs=0.15)
    assert all(attempt.steps[4].time <= s.start < s.end <= attempt.steps[5].time for s in stall)
    lines = render_text(timeline, width=60)
    assert "E eval" in " ".join(lines[2:]) and "H" in lines[0]


def test_a_terminal_gets_colours_instead_of_letters(job: Path) -> None:
    """With colour, each bar is ANSI background runs (no letters) and the legend shows
    swatches, so the rows read as colours on a terminal."""
    timeline = job_timeline(read_attempts(job))
    lines = render_text(timeline, width=40, colour=True)
    assert "\x1b[48;5;" in lines[0] and "\x1b[48;5;" in lines[1]
    assert not re.search(r"[A-Z]", re.sub(r"\x1b\[[0-9;]*m", "", lines[0]))
    assert "\x1b[48;5;" in lines[-1] and "productive" in " ".join(lines[3:])
