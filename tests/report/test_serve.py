"""``trainmon report RUN --serve``: the live report page.

In-process: the incremental reader (report/live.py) reads what ``load_run`` reads after every
kind of append (a step, a line cut short then completed, a damaged line, a restart, a file
replaced), and ``data.json`` sends only the points logged since a page's version. As a real
subprocess on runs written by ``trainmon.Monitor``: ``/summary.json`` is byte for byte what
``trainmon summary --json`` prints, a step logged while serving shows up in the next
``data.json``, a resumed second Monitor is read again from the start, another host name is
refused, SIGINT ends it with status 0; and in headless Chromium the served page draws a chart
per metric and then the steps logged after it was loaded, without a reload.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import trainmon
from trainmon.cli import main
from trainmon.cli.commands import summary_json
from trainmon.report import load_run
from trainmon.report.live import LiveRun, LiveRuns
from trainmon.report.summary import summarize

# ---- helpers -----------------------------------------------------------------------------------


def config(base: Path) -> dict[str, Any]:
    return {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
    }


def log_steps(monitor: Any, first: int, last: int, offset: float = 0.0) -> None:
    """Log steps ``first``..``last`` (loss, lr, memory, a step-time breakdown) and flush."""
    for step in range(first, last + 1):
        monitor.step = step
        monitor.log(
            {
                "train/loss": offset + 1.0 / step,
                "train/lr": 1e-3,
                "mem/allocated_mb": 1000.0 + step,
                "perf/step_time_ms": 10.0 + step % 3,
                "perf/forward_ms": 3.0,
            }
        )
    monitor.flush()


def record(step: int, **values: float | str) -> bytes:
    """A ``scalars`` line (NaN written as the journal writes it: ``"NaN"``)."""
    line = {"v": 1, "kind": "scalars", "step": step, "time": 1e9 + step, "values": values}
    return orjson.dumps(line) + b"\n"


def meta(job: str = "job") -> bytes:
    return orjson.dumps({"v": 1, "kind": "meta", "time": 1e9, "job": job}) + b"\n"


def same_as_load_run(live: LiveRun, path: Path) -> None:
    """The live snapshot reads as ``load_run`` reads the file now."""
    live.refresh()
    snapshot, fresh = live.snapshot(), load_run(path)
    assert snapshot.notes == fresh.notes
    assert snapshot.step_count == fresh.step_count
    assert snapshot.series.keys() == fresh.series.keys()
    for name, series in fresh.series.items():
        assert list(snapshot.series[name].steps) == list(series.steps), name
        assert list(snapshot.series[name].values) == list(series.values), name
    assert summarize(snapshot).as_dict() == summarize(fresh).as_dict()


# ---- the incremental reader (in-process) -----------------------------------------------------


def test_appended_lines_are_read_as_load_run_reads_the_whole_file(tmp_path: Path) -> None:
    """After each append (steps, a half-written line, its end, a damaged line, a new attempt
    restarting at an earlier step, a file replaced) the live run holds what ``load_run``
    reads; plain appends are read from the kept offset (same epoch), a restart or a
    replaced file from the start."""
    journal = tmp_path / "metrics.jsonl"
    journal.write_bytes(meta() + b"".join(record(s, **{"train/loss": 1 / s}) for s in (1, 2, 3)))
    live = LiveRun(journal, None, verify=True)
    same_as_load_run(live, journal)
    epoch = live.epoch
    with open(journal, "ab") as f:
        f.write(record(4, **{"train/loss": 0.25, "train/lr": 0.1}))
        line = record(5, **{"train/loss": 0.2})
        f.write(line[:20])  # still being written
    assert live.refresh()
    assert live.offset < journal.stat().st_size
    same_as_load_run(live, journal)  # the cut line is noted, as load_run notes it
    with open(journal, "ab") as f:
        f.write(line[20:] + b"{not json\n" + record(6, **{"train/loss": 0.1}))
    same_as_load_run(live, journal)
    assert live.snapshot().series["train/loss"].steps == [1, 2, 3, 4, 5, 6]
    assert live.epoch == epoch
    assert not live.refresh()  # nothing new
    with open(journal, "ab") as f:  # a restart: a new attempt from step 3 replaces 3..6
        f.write(meta() + record(3, **{"train/loss": 9.0}))
    same_as_load_run(live, journal)
    assert live.epoch == epoch + 1
    assert list(live.snapshot().series["train/loss"].values) == [1.0, 0.5, 9.0]
    with open(journal, "ab") as f:
        f.write(record(4, **{"train/loss": 8.0}))
    same_as_load_run(live, journal)
    assert live.epoch == epoch + 1
    journal.write_bytes(meta("other") + record(1, **{"eval/acc": 0.5}))  # replaced
    same_as_load_run(live, journal)
    assert live.epoch == epoch + 2


def test_a_new_attempt_is_read_again_once_it_logs_its_first_step(tmp_path: Path) -> None:
    """A ``meta`` line alone (a restart that has not logged yet) does not say which steps it
    replaces: its first step, appended later, makes the reader read the file again."""
    journal = tmp_path / "metrics.jsonl"
    steps = b"".join(record(s, **{"train/loss": float(s)}) for s in range(1, 6))
    journal.write_bytes(meta() + steps)
    live = LiveRun(journal, None, verify=True)
    with open(journal, "ab") as f:
        f.write(meta())
    same_as_load_run(live, journal)
    assert live.awaiting
    epoch = live.epoch
    with open(journal, "ab") as f:
        f.write(record(2, **{"train/loss": 20.0}))
    same_as_load_run(live, journal)
    assert live.epoch == epoch + 1 and not live.awaiting
    assert list(live.snapshot().series["train/loss"].values) == [1.0, 20.0]


def test_updates_send_the_points_since_a_version(tmp_path: Path) -> None:
    """``updates(v)``: nothing when current; the new points of each series ("append") after
    steps; everything ("full") for an unknown version or after a restart."""
    journal = tmp_path / "metrics.jsonl"
    journal.write_bytes(
        meta() + b"".join(record(s, **{"train/loss": 1 / s, "mem/rss_mb": 5.0}) for s in (1, 2))
    )
    runs = LiveRuns([str(journal)], [None])
    assert runs.updates(runs.version) == {"version": runs.version}
    first = runs.version
    with open(journal, "ab") as f:
        f.write(record(3, **{"train/loss": "NaN"}) + record(3, **{"mem/rss_mb": 6.0}))
    assert runs.refresh()
    update = runs.updates(first)
    assert update["mode"] == "append" and update["version"] == first + 1
    tails = {t["metric"]: t for t in update["series"]}
    loss = {"run": 0, "metric": "train/loss", "x": [3], "y": [None], "nonfinite": [3]}
    assert tails["train/loss"] == loss
    assert tails["mem/rss_mb"]["x"] == [3] and tails["mem/rss_mb"]["y"] == [6.0]
    assert '<section id="overview">' in update["sections"]["overview"]
    assert runs.updates(first - 1)["mode"] == "full"
    with open(journal, "ab") as f:
        f.write(record(4, **{"eval/acc": 0.5}))  # a new metric: the page's charts change
    runs.refresh()
    assert runs.updates(first + 1)["mode"] == "full"
    full = runs.updates(0, full=True)
    assert {c["title"] for c in full["charts"]} >= {"train/loss", "eval/acc"}


def test_port_and_host_go_with_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "metrics.jsonl"
    journal.write_bytes(meta() + record(1, **{"train/loss": 1.0}))
    assert main(["report", str(journal), "--port", "8000", "-o", str(tmp_path / "r.html")]) == 2
    assert "--port and --host go with --serve" in capsys.readouterr().err
    assert main(["report", str(journal), "--serve", "--port", "70000"]) == 2


# ---- the server (a real subprocess) ----------------------------------------------------------


class Server:
    """``python -m trainmon report RUN --serve --port 0`` and its address."""

    def __init__(self, *runs: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainmon", "report", *map(str, runs), "--serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a suite started in the background by a shell without job control inherits SIGINT
            # ignored, and Python then never raises KeyboardInterrupt: give the child the default
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.fullmatch(r"serving (http://127\.0\.0\.1:\d+/) \(Ctrl-C to stop\)\n", line)
        assert match, (line, self.process.stderr.read() if self.process.stderr else "")
        self.url = match.group(1)

    def get(self, path: str, headers: dict[str, str] | None = None) -> bytes:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as response:
            body: bytes = response.read()
            return body

    def data(self, since: int) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.get(f"data.json?since={since}"))
        return found

    def stop(self) -> tuple[int, str]:
        """SIGINT, as Ctrl-C sends: the exit status and stderr."""
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=20)
        assert self.process.stderr is not None
        return code, self.process.stderr.read()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def live_version(page: str) -> int:
    """The version a served page shows (its live script's config)."""
    config = json.loads(page.split('id="trainmon-live">')[1].split("</script>")[0])
    return int(config["version"])


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Any]:
    """A Monitor still writing (20 steps logged), closed at the end."""
    with trainmon.Monitor(config(tmp_path)) as running:
        log_steps(running, 1, 20)
        yield running


def summary_cli(run: Path) -> bytes:
    result = subprocess.run(
        [sys.executable, "-m", "trainmon", "summary", str(run), "--json"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_summary_json_and_new_steps_while_a_monitor_writes(tmp_path: Path, monitor: Any) -> None:
    """The served run follows the Monitor: ``/summary.json`` is what ``trainmon summary --json``
    prints, before and after more steps; ``data.json`` sends each new step; SIGINT ends the
    server with status 0 and no traceback."""
    run = tmp_path / "job"
    server = Server(run)
    try:
        assert server.get("summary.json") == summary_cli(run)
        page = server.get("").decode()
        assert 'id="trainmon-live"' in page and "uPlot" in page
        version = live_version(page)
        assert server.data(version) == {"version": version}
        log_steps(monitor, 21, 22)
        update = server.data(version)
        assert update["mode"] == "append"
        tails = {t["metric"]: t for t in update["series"]}
        assert tails["train/loss"]["x"] == [21, 22]
        assert tails["train/loss"]["y"] == [1 / 21, 1 / 22]
        assert [c["kind"] for c in update["charts"]] == ["stacked"]
        assert update["charts"][0]["stack"]["x"][-1] == 22
        assert "22" in update["sections"]["overview"]
        assert server.get("summary.json") == summary_cli(run)
        assert server.data(update["version"]) == {"version": update["version"]}
        code, err = server.stop()
        assert code == 0 and "Traceback" not in err, err
        assert server.process.stdout is not None
        assert server.process.stdout.read().strip() == "stopped"
    finally:
        server.kill()


@pytest.mark.slow
def test_a_resumed_second_monitor_is_read_again(tmp_path: Path) -> None:
    """A second Monitor resumed at step 16 into the served folder (its steps 16-30 replace the
    first attempt's 16-20): ``data.json`` says "full" with the restart mark, and
    ``/summary.json`` still equals ``trainmon summary --json``; two runs give a list."""
    with trainmon.Monitor(config(tmp_path)) as first:
        log_steps(first, 1, 15)
        state = first.state_dict()
        log_steps(first, 16, 20)
    run = tmp_path / "job"
    with trainmon.Monitor(config(tmp_path / "b")) as beside:
        log_steps(beside, 1, 5)
    server = Server(run)
    pair = Server(run, tmp_path / "b" / "job")
    try:
        version = live_version(server.get("").decode())
        with trainmon.Monitor(config(tmp_path)) as second:
            second.load_state_dict(state)
            log_steps(second, 16, 30, offset=0.5)
        update = server.data(version)
        assert update["mode"] == "full"
        assert update["runs"][0]["restarts"] == [
            {"x": 16, "attempt": 2, "label": "resumed from step 15"}
        ]
        loss = next(c for c in update["charts"] if c["title"] == "train/loss")["series"][0]
        assert loss["x"] == list(range(1, 31)) and loss["y"][15] == 0.5 + 1 / 16
        assert server.get("summary.json") == summary_cli(run)
        listed = json.loads(pair.get("summary.json"))
        other = tmp_path / "b" / "job"
        assert [s["run"] for s in listed] == [f"job #1 ({run})", f"job #2 ({other})"]
        assert listed[0]["restarts"] == json.loads(summary_cli(run))["restarts"]
    finally:
        server.kill()
        pair.kill()


@pytest.mark.slow
def test_the_server_listens_on_loopback_and_refuses_other_host_names(tmp_path: Path) -> None:
    """Bound to 127.0.0.1; a request naming another host (DNS rebinding) gets 403; an unknown
    path 404; a bad version 400."""
    with trainmon.Monitor(config(tmp_path)) as done:
        log_steps(done, 1, 3)
    server = Server(tmp_path / "job")
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.get("summary.json", {"Host": "attacker.example"})
        assert refused.value.code == 403
        assert server.get("summary.json", {"Host": "localhost:1"})
        for path, status in (("nothing", 404), ("data.json?since=x", 400)):
            with pytest.raises(urllib.error.HTTPError) as answer:
                server.get(path)
            assert answer.value.code == status
    finally:
        server.kill()


# ---- the page in a browser ---------------------------------------------------------------------


def _browser() -> Any:
    import test_report_browser

    return test_report_browser


def browse(server: Server, monitor: Any, query: str, profile: Path) -> tuple[str, int]:
    """The DOM of the served page after Chromium polled it (every 0.1 s) for a while as the
    Monitor logged a step every 50 ms; and the last step logged."""
    browser = _browser()
    stop = threading.Event()
    logged = [max(20, monitor.step)]

    def keep_logging() -> None:
        while not stop.wait(0.05):
            logged.append(logged[-1] + 1)
            log_steps(monitor, logged[-1], logged[-1])

    writer = threading.Thread(target=keep_logging)
    writer.start()
    try:
        result = browser.chromium(
            ["--virtual-time-budget=30000", "--dump-dom", server.url + "?poll=0.1" + query],
            profile,
        )
    finally:
        stop.set()
        writer.join()
    assert result.returncode == 0, result.stderr[-2000:]
    dom: str = result.stdout
    assert browser.attribute(dom, "body", "data-errors") == "0", re.findall(
        r'id="errors"[^>]*>([^<]*)', dom
    )
    assert browser.attribute(dom, "body", "data-live-state") == "live"
    assert int(browser.attribute(dom, "body", "data-live-updates")) >= 1
    return dom, logged[-1]


@pytest.mark.slow
def test_the_page_draws_new_steps_without_a_reload_and_keeps_a_zoom(
    tmp_path: Path, monitor: Any
) -> None:
    """Headless Chromium on the served page while the Monitor logs: a chart per metric is
    drawn with no error, and each chart then holds more points than when the page was loaded,
    up to a step logged after it was loaded: appended in place (``data-live-updates``; the
    page never reloaded), the x range following the data. Opened zoomed on steps 5-15, every
    chart gets the new points and keeps that zoom."""
    browser = _browser()
    if browser.CHROMIUM is None:
        pytest.skip("headless Chromium not installed")
    server = Server(tmp_path / "job")
    try:
        dom, last = browse(server, monitor, "", tmp_path / "profile")
        titles = re.findall(r"<figcaption>(?:<label>.*?</label>)?([^<]+)<span", dom)
        assert set(titles) == {"train/loss", "train/lr", "mem/allocated_mb", "step time breakdown"}
        charts = browser.figures(dom)
        assert len(charts) == 4 and all(f["data-rendered"] == "1" for f in charts), charts
        for chart in charts:
            assert int(chart["data-points"]) > int(chart["data-points-at-load"]) >= 20, chart
            assert 20 < int(chart["data-last-x"]) <= last, chart
            assert float(chart["data-x-max"]) == float(chart["data-last-x"]), chart
        dom, last = browse(server, monitor, "&zoom=5,15", tmp_path / "profile-zoom")
        for chart in browser.figures(dom):
            assert int(chart["data-points"]) > int(chart["data-points-at-load"]), chart
            assert (chart["data-x-min"], chart["data-x-max"]) == ("5", "15"), chart
    finally:
        server.kill()


def test_summary_json_is_the_summary_commands_output(tmp_path: Path) -> None:
    """One code path: ``summary --json`` prints ``summary_json([run])``."""
    journal = tmp_path / "metrics.jsonl"
    journal.write_bytes(meta() + record(1, **{"train/loss": 1.0}) + record(2, **{"x/y": 0.5}))
    document = json.loads(summary_json([load_run(journal)]))
    assert document["run"] == "job" and document["steps"] == 2
    assert isinstance(json.loads(summary_json([load_run(journal)] * 2)), list)


def test_a_tensorboard_folder_is_served_as_read_at_the_start(tmp_path: Path) -> None:
    """A TensorBoard folder beside a journal: read once (it never changes the version), while
    the journal's new steps still come as appended points."""
    from test_report_loading import deepspeed_folder

    deepspeed_folder(tmp_path / "ds", steps=20)
    journal = tmp_path / "metrics.jsonl"
    journal.write_bytes(meta() + record(1, **{"train/loss": 1.0}))
    runs = LiveRuns([str(tmp_path / "ds"), str(journal)], [None, None])
    first = runs.version
    assert not runs.refresh()
    with open(journal, "ab") as f:
        f.write(record(2, **{"train/loss": 0.5}))
    assert runs.refresh()
    update = runs.updates(first)
    assert update["mode"] == "append"
    assert [(t["run"], t["metric"], t["x"]) for t in update["series"]] == [(1, "train/loss", [2])]
