"""Every reader of a run shows one surviving timeline: a restart from scratch into the same
folder replaces the earlier attempt's steps in ``summary``, ``compare``, ``report``,
``tail``, ``sync`` and ``goodput`` alike; and a wall clock that jumps never gives a negative
duration or a goodput of nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import orjson
import pytest

import trainmon
from trainmon.cli import main


def _restarted_from_scratch(base: Path) -> Path:
    """200 steps (loss = 1/step), then a new attempt from step 1 to 50 (loss = 100 + 1/step)."""
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
    }
    for last, offset in ((200, 0.0), (50, 100.0)):
        with trainmon.Monitor(config) as monitor:
            for step in range(1, last + 1):
                monitor.step = step
                monitor.write_events([("train/loss", offset + 1.0 / step)])
    return base / "job"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_a_restart_from_scratch_replaces_the_earlier_attempt_in_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """200 steps, then a restart from step 1 to 50: summary, compare, report, tail, sync and
    goodput all show 50 steps ending with the new attempt's loss, and name the replacement."""
    run = _restarted_from_scratch(tmp_path)
    final = 100.0 + 1.0 / 50
    summary = _json(capsys, ["summary", str(run), "--json"])
    assert (summary["steps"], summary["first_step"], summary["last_step"]) == (50, 1, 50)
    assert summary["loss"]["final"] == pytest.approx(final)
    (loss,) = [m for m in summary["metrics"] if m["name"] == "train/loss"]
    assert loss["count"] == 50 and loss["min"] == pytest.approx(final)
    assert main(["summary", str(run)]) == 0
    text = capsys.readouterr().out
    assert "50 steps logged (1 … 50)" in text
    assert "restarted from scratch · steps 1–200 of the previous attempt replaced" in text

    (tmp_path / "other").mkdir()
    compare = _json(capsys, ["compare", str(run), str(run), "--json"])
    steps_row = [r for r in compare["rows"] if r["label"] == "steps"]
    assert steps_row and steps_row[0]["a"] == 50

    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    assert "50 steps" in (tmp_path / "r.html").read_text()
    capsys.readouterr()

    assert main(["tail", str(run), "-n", "100"]) == 0
    tail = capsys.readouterr().out.splitlines()
    assert tail[0].startswith("── restart: restarted from scratch · steps 1–200")
    assert [line.split(" |")[0] for line in tail[1:]] == [f"step {s}" for s in range(10, 51, 10)]

    assert main(["sync", str(run), "--to", "csv", str(tmp_path / "csv")]) == 0
    with open(tmp_path / "csv" / "job" / "train_loss.csv", newline="") as f:
        rows = [(int(r[0]), float(r[1])) for r in list(csv.reader(f))[1:]]
    assert rows == [(s, pytest.approx(100.0 + 1.0 / s)) for s in range(1, 51)]
    capsys.readouterr()

    goodput = _json(capsys, ["goodput", str(run), "--json"])
    kept = [a["steps"] - a["redone_steps"] for a in goodput["attempts"]]
    assert kept == [0, 50] and goodput["attempts"][0]["redone_steps"] == 200


def _jumping_journal(path: Path, *, mono: bool) -> None:
    """100 steps 0.1 s apart, then the wall clock steps back an hour at step 51; heartbeats
    carry the monotonic clock when ``mono``."""
    lines = []
    start = 1_800_000_000.0
    meta = {"v": 1, "kind": "meta", "time": start, "job": "job", "pid": 1, "attempt": "a"}
    if mono:
        meta["mono"] = 500.0
    lines.append(meta)
    for step in range(1, 101):
        elapsed = 0.1 * step
        wall = start + elapsed - (3600.0 if step > 50 else 0.0)
        values = {"train/loss": 1.0 / step, "perf/step_time_ms": 100.0}
        lines.append({"v": 1, "kind": "scalars", "step": step, "time": wall, "values": values})
        if mono and step % 10 == 5:
            lines.append({"v": 1, "kind": "heartbeat", "time": wall, "mono": 500.0 + elapsed})
    end = start + 10.0 - 3600.0
    lines.append({"v": 1, "kind": "end", "time": end, "step": 100, "status": "success"})
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))


@pytest.mark.parametrize("mono", [True, False], ids=["heartbeats", "old-journal"])
def test_a_wall_clock_jump_back_keeps_durations_and_goodput_right(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mono: bool
) -> None:
    """An hour's step back of the wall clock mid-run: summary's duration is the run's 10 s
    (never negative), goodput counts its 10 s of steps as productive (not 0 %), and both say
    once that the clock jumped back by an hour."""
    run = tmp_path / "job"
    _jumping_journal(run, mono=mono)
    summary = _json(capsys, ["summary", str(run), "--json"])
    assert summary["duration_s"] == pytest.approx(9.9, abs=0.15)
    assert main(["summary", str(run)]) == 0
    text = capsys.readouterr().out
    assert "-" not in text.split(" in ", 1)[1].split(" ·")[0]
    assert text.count("the wall clock jumped back by 1.00 h") == 1
    goodput = _json(capsys, ["goodput", str(run), "--json"])
    assert goodput["wall_s"] == pytest.approx(10.0, abs=0.2)
    assert goodput["goodput"] == pytest.approx(1.0, abs=0.03)
    assert main(["goodput", str(run)]) == 0
    assert capsys.readouterr().err.count("the wall clock jumped back by 1.00 h") == 1
