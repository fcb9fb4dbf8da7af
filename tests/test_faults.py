"""Faults a long training run meets: unwritable folders, a full disk, a broken or slow writer,
and hostile names. Training never sees an exception; the healthy writers keep every value."""

from __future__ import annotations

import csv
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainmon import ConfigError, Monitor, Writer, read_journal
from trainmon.core.events import StepScalars
from trainmon.writers.jsonl import JsonlWriter

FILE_SECTIONS = ("tensorboard", "csv_monitor", "jsonl")
DROPPED = "trainmon/dropped_events"
WRITER_ERRORS = "trainmon/writer_errors"


# ---- helpers ---------------------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def trainmon_log() -> Iterator[list[logging.LogRecord]]:
    """Everything the ``trainmon`` logger emits (it does not propagate to the root logger)."""
    handler = _Collect()
    logger = logging.getLogger("trainmon")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def _warnings(records: Sequence[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.levelno >= logging.WARNING]


def _section(path: Path) -> dict[str, Any]:
    return {"enabled": True, "output_path": str(path), "job_name": "run"}


def _config(**sections: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"console": {"enabled": False}}
    config.update(sections)
    return config


def _journal(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_journal(run_dir))


def _journal_series(run_dir: Path, name: str) -> list[tuple[int, Any]]:
    return [
        (r["step"], r["values"][name])
        for r in _journal(run_dir)
        if r.get("kind") == "scalars" and name in r["values"]
    ]


def _csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _tb_series(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _files_under(root: Path) -> set[Path]:
    return {Path(d) / f for d, _, files in os.walk(root) for f in files}


def _open_fds_under(folder: Path) -> list[str]:
    prefix = str(folder.resolve())
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == prefix or target.startswith(prefix + "/"):
            held.append(target)
    return held


class BadWriter(Writer):
    """A writer whose ``write`` always raises."""

    kind = "bad"
    location = "nowhere://bad"

    def __init__(self) -> None:
        self.calls = 0

    def write(self, records: Sequence[StepScalars]) -> None:
        self.calls += 1
        raise RuntimeError("bad writer exploded")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class SlowWriter(Writer):
    """A writer that sleeps in every ``write`` and remembers how many values each call got."""

    kind = "slow"
    location = "nowhere://slow"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.batch_sizes: list[int] = []

    def write(self, records: Sequence[StepScalars]) -> None:
        self.batch_sizes.append(sum(len(r.values) for r in records))
        time.sleep(self.delay_s)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# ---- an output folder that cannot be created -------------------------------------------------


@pytest.mark.parametrize("broken", FILE_SECTIONS)
def test_unwritable_output_folder_disables_only_that_writer(
    tmp_path: Path, broken: str, trainmon_log: list[logging.LogRecord]
) -> None:
    """A writer whose folder cannot be created is skipped with one warning naming it and the path,
    while the other writers receive every value."""
    blocker = tmp_path / "afile"
    blocker.write_text("a regular file, not a folder")
    bad = blocker / "sub"  # NotADirectoryError, even for root
    good = tmp_path / "good"
    monitor = Monitor(_config(**{s: _section(bad if s == broken else good) for s in FILE_SECTIONS}))
    for step in range(50):
        monitor.log({"loss": step * 0.5}, step=step)
    monitor.close()

    warnings = _warnings(trainmon_log)
    assert len(warnings) == 1, [w.getMessage() for w in warnings]
    message = warnings[0].getMessage()
    assert broken in message
    assert str(bad / "run") in message
    assert "NotADirectoryError" in message
    assert blocker.read_text() == "a regular file, not a folder"

    expected = [(step, step * 0.5) for step in range(50)]
    run = good / "run"
    if broken != "jsonl":
        assert _journal_series(run, "loss") == expected
    if broken != "csv_monitor":
        rows = _csv_rows(run / "loss.csv")
        assert rows[0] == ["step", "loss"]
        assert [(int(s), float(v)) for s, v in rows[1:]] == expected
    if broken != "tensorboard":
        assert _tb_series(run, "loss") == expected


# ---- a full disk -----------------------------------------------------------------------------


def _log_with_checkpoints(
    monitor: Monitor, names: list[str], steps: int
) -> dict[str, list[tuple[int, float]]]:
    expected: dict[str, list[tuple[int, float]]] = {name: [] for name in names}
    for step in range(steps):
        values = {name: step + i / 8 for i, name in enumerate(names)}
        monitor.log(values, step=step)  # must never raise
        for name, value in values.items():
            expected[name].append((step, value))
        if step % 100 == 99:
            assert monitor.flush(timeout=30)  # e.g. at a checkpoint
    return expected


def test_full_disk_loses_only_that_writer_and_is_counted_elsewhere(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """When the CSV folder's disk fills up, training carries on, one warning names the CSV writer,
    the JSONL journal elsewhere has every step plus trainmon/writer_errors > 0, close names the
    CSV writer as having lost values, and no file on the full disk is left open after close."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 64k tmpfs: {mounted.stderr.strip()}")
    try:
        journal_root = tmp_path / "journal"
        monitor = Monitor(
            _config(
                csv_monitor=_section(small),
                jsonl=_section(journal_root),
                trainmon={"flush_interval_s": 0.05},
            )
        )
        names = [f"layer{i}/grad_norm" for i in range(8)]
        expected = _log_with_checkpoints(monitor, names, 3000)
        monitor.close()

        stats = os.statvfs(small)
        assert stats.f_bavail == 0, "the test never filled the disk"
        warnings = _warnings(trainmon_log)
        assert len(warnings) == 2, [w.getMessage() for w in warnings]
        assert "csv" in warnings[0].getMessage()
        assert str(small / "run") in warnings[0].getMessage()
        assert warnings[0].exc_info is not None
        assert isinstance(warnings[0].exc_info[1], OSError)
        summary = warnings[1].getMessage()
        assert "not delivered" in summary and str(small / "run") in summary

        run = journal_root / "run"
        for name in names:
            assert _journal_series(run, name) == expected[name]
        errors = [v for _, v in _journal_series(run, WRITER_ERRORS)]
        assert errors and errors[-1] > 0
        assert _open_fds_under(small) == []
    finally:
        if subprocess.run(["umount", str(small)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_metric_file_linked_outside_the_folder_is_refused_and_costs_no_other_metric(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """A metric's CSV file that is a symlink leading out of the run folder is never written
    through (one warning names the CSV writer, close counts its 300 lost values), while the
    other metrics' CSV files and the journal keep every value."""
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    run = tmp_path / "out" / "run"
    run.mkdir(parents=True)
    (run / "doomed.csv").symlink_to(victim)
    monitor = Monitor(
        _config(
            csv_monitor=_section(tmp_path / "out"),
            jsonl=_section(tmp_path / "out"),
            trainmon={"flush_interval_s": 0.05},
        )
    )
    expected = _log_with_checkpoints(monitor, ["doomed", "fine"], 300)
    monitor.close()

    assert victim.read_text() == "do not touch"
    warnings = _warnings(trainmon_log)
    assert len(warnings) == 2, [w.getMessage() for w in warnings]
    assert "csv" in warnings[0].getMessage()
    assert "not delivered" in warnings[1].getMessage()
    assert f"csv writer ({run}): 300 values" in warnings[1].getMessage()
    rows = _csv_rows(run / "fine.csv")
    assert rows[0] == ["step", "fine"]
    assert [(int(s), float(v)) for s, v in rows[1:]] == expected["fine"]
    assert _journal_series(run, "doomed") == expected["doomed"]
    assert _journal_series(run, WRITER_ERRORS)[-1][1] > 0


# ---- a writer that raises ---------------------------------------------------------------------


def test_raising_writer_is_reported_once_counted_and_isolated(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """A writer whose write() raises is reported once with its traceback, each failure is counted
    in trainmon/writer_errors, the values it gave up are counted at close, and the other writer
    still gets every value."""
    bad = BadWriter()
    run = tmp_path / "run"
    monitor = Monitor(_config(), writers=[bad, JsonlWriter(run, "run")])
    for step in range(100):
        monitor.log({"loss": step / 4}, step=step)
        if step % 10 == 9:
            assert monitor.flush(timeout=30)
    monitor.close()

    assert bad.calls >= 10
    warnings = _warnings(trainmon_log)
    assert len(warnings) == 2, [w.getMessage() for w in warnings]
    assert "bad writer (nowhere://bad)" in warnings[1].getMessage()  # what it gave up
    assert monitor.undelivered["bad writer (nowhere://bad)"] >= 100
    message = warnings[0].getMessage()
    assert "bad" in message and "write" in message and "nowhere://bad" in message
    exc_info = warnings[0].exc_info
    assert exc_info is not None and exc_info[2] is not None
    assert isinstance(exc_info[1], RuntimeError) and "bad writer exploded" in str(exc_info[1])

    assert _journal_series(run, "loss") == [(step, step / 4) for step in range(100)]
    counted = _journal_series(run, WRITER_ERRORS)[-1][1]
    # the last counter record is itself a failed write that it cannot include
    assert bad.calls - 1 <= counted <= bad.calls


# ---- a full queue ----------------------------------------------------------------------------


def test_full_queue_drops_without_blocking_and_counts_every_drop(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """With when_full="drop" and a writer far slower than the loop, logging never blocks, the
    slow writer's misses are counted under its name (one warning), and every event reaches the
    journal unless it was dropped, and every drop is counted."""
    slow = SlowWriter(delay_s=0.1)
    run = tmp_path / "run"
    monitor = Monitor(
        _config(trainmon={"queue_size": 10, "when_full": "drop"}),
        writers=[slow, JsonlWriter(run, "run")],
    )
    total = 2000  # at <= 10 values per 0.1 s write the writer would need >= 20 s for these
    started = time.monotonic()
    for step in range(total):
        monitor.log({"loss": float(step)}, step=step)
    elapsed = time.monotonic() - started
    monitor.close()

    assert elapsed < 5.0
    lost = monitor.undelivered
    slow_name = "slow writer (nowhere://slow)"
    assert lost[slow_name] > 0
    assert sum(slow.batch_sizes) < total
    assert monitor.dropped_events == sum(lost.values())
    written = _journal_series(run, "loss")
    assert all(value == float(step) for step, value in written)
    queue_drops = lost.get("queue (full)", 0)
    journal_misses = sum(n for where, n in lost.items() if where.startswith("jsonl writer"))
    # with a 10-value queue even the journal's own lane may overflow in "drop" mode (counted,
    # together with the counter records it missed)
    assert len(written) + queue_drops <= total <= len(written) + queue_drops + journal_misses
    assert 0 < _journal_series(run, DROPPED)[-1][1] <= monitor.dropped_events
    warned = [w.getMessage() for w in _warnings(trainmon_log) if slow_name in w.getMessage()]
    assert len(warned) == 2, warned  # when it fell behind, and what it missed at close
    assert "cannot keep up" in warned[0]


def test_full_queue_waits_for_a_writer_that_catches_up(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """With when_full="wait" (the default) and a writer that catches up within full_wait_s, a small
    queue holds the loop back instead of dropping: every value is written and nothing is counted."""
    slow = SlowWriter(delay_s=0.01)
    run = tmp_path / "run"
    monitor = Monitor(
        _config(trainmon={"queue_size": 10, "full_wait_s": 10.0}),
        writers=[slow, JsonlWriter(run, "run")],
    )
    assert monitor.config.trainmon.when_full == "wait"
    for step in range(300):
        monitor.log({"loss": float(step)}, step=step)
    monitor.close()

    assert monitor.dropped_events == 0
    assert max(slow.batch_sizes) <= 10  # the queue bound really held the loop back
    assert _journal_series(run, "loss") == [(step, float(step)) for step in range(300)]
    assert _journal_series(run, DROPPED) == []
    assert _warnings(trainmon_log) == []


# ---- hostile names ---------------------------------------------------------------------------


@pytest.mark.parametrize("section", FILE_SECTIONS)
@pytest.mark.parametrize("job_name", ["../escape", "/abs", "a\x00b", "a/../../b", ""])
def test_hostile_job_name_is_refused_naming_the_key(
    tmp_path: Path, section: str, job_name: str
) -> None:
    """A job_name that is absolute, climbs out with '..', holds a NUL or is empty is a ConfigError
    naming '<section>.job_name', and nothing is created."""
    config = _config(**{section: {"enabled": True, "output_path": str(tmp_path / "out")}})
    config[section]["job_name"] = job_name
    with pytest.raises(ConfigError) as info:
        Monitor(config)
    assert f"{section}.job_name" in str(info.value)
    assert list(tmp_path.iterdir()) == []


HOSTILE_METRICS = [
    "../../x",
    "/etc/passwd",
    "a\x00b",
    "..",
    ".",
    " spaced name ",
    "n" * 300,
    "n" * 299 + "m",
    "a/b",
    "a_b",
    "../../../../../../../../../../tmp/trainmon_escape_probe",
    "C:\\windows\\evil",
    "new\nline",
    'quote"d,comma',
    "tab\there",
]


def test_hostile_metric_names_stay_inside_the_run_folder_and_read_back_exactly(
    tmp_path: Path,
) -> None:
    """Metric names with '..', absolute paths, NULs, separators, odd characters or 300 characters
    create files only inside the run folder, one CSV file each, and every value reads back
    exactly from CSV, JSONL and TensorBoard."""
    output = tmp_path / "deep" / "a" / "b" / "c" / "out"
    run = output / "run"
    etc_passwd = Path("/etc/passwd").read_bytes()
    before = _files_under(tmp_path)
    monitor = Monitor(_config(**{s: _section(output) for s in FILE_SECTIONS}))
    expected: dict[str, list[tuple[int, float]]] = {name: [] for name in HOSTILE_METRICS}
    for step in range(5):
        values = {name: i * 1000 + step + 0.25 for i, name in enumerate(HOSTILE_METRICS)}
        monitor.log(values, step=step)
        for name, value in values.items():
            expected[name].append((step, value))
    monitor.close()

    new_files = _files_under(tmp_path) - before
    outside = [p for p in new_files if not p.resolve().is_relative_to(run.resolve())]
    assert outside == []
    assert Path("/etc/passwd").read_bytes() == etc_passwd
    assert not Path("/etc/passwd.csv").exists()
    assert not Path("/tmp/trainmon_escape_probe.csv").exists()

    for name in HOSTILE_METRICS:
        assert _journal_series(run, name) == expected[name], name

    csv_files = sorted(run.glob("*.csv"))
    assert len(csv_files) == len(HOSTILE_METRICS)
    found = []
    for path in csv_files:
        rows = _csv_rows(path)
        assert rows[0][0] == "step" and len(rows[0]) == 2, path
        found.append((rows[0][1], tuple(tuple(row) for row in rows[1:])))
    wanted = [
        (name.rsplit("/", 1)[-1], tuple((str(s), repr(v)) for s, v in expected[name]))
        for name in HOSTILE_METRICS
    ]
    assert sorted(found) == sorted(wanted)

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == set(HOSTILE_METRICS)
    for name in HOSTILE_METRICS:
        points = [(e.step, e.value) for e in acc.Scalars(name)]
        assert points == expected[name], name


# ---- a full disk that frees up again ---------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, unmounted afterwards (skipped where mounting is not allowed)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 256k tmpfs: {mounted.stderr.strip()}")
    try:
        yield small
    finally:
        if subprocess.run(["umount", str(small)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(small)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Fill the file system holding ``folder`` until it refuses a byte more."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"x" * 4096)
            except OSError:
                break
        while True:
            try:
                f.write(b"x")
            except OSError:
                break
    assert os.statvfs(folder).f_bavail == 0
    return filler


def _train_through_a_full_disk(small: Path, reference: Path) -> tuple[Monitor, list[int]]:
    """Steps 0-49 on a healthy disk, 50-249 on a full one, 250-349 after space is freed."""
    from trainmon.writers.csv import CsvWriter
    from trainmon.writers.tensorboard import TensorBoardWriter

    run = small / "run"
    writers = [TensorBoardWriter(run), CsvWriter(run), JsonlWriter(run, "run")]
    monitor = Monitor(
        _config(trainmon={"flush_interval_s": 0.02}),
        writers=[*writers, JsonlWriter(reference, "ref")],
    )
    steps = list(range(350))
    filler = None
    for step in steps:
        if step == 50:
            assert monitor.flush(timeout=30)
            filler = _fill(small)
        if step == 250:
            assert monitor.flush(timeout=30)
            assert filler is not None
            filler.unlink()
        monitor.log({"loss": step / 8, "acc": step / 1000}, step=step)  # never raises
        if step % 25 == 24:
            time.sleep(0.05)  # let the background thread flush (and fail) along the way
    monitor.close()
    return monitor, steps


def _every_reader(run: Path, name: str) -> dict[str, list[tuple[int, float]]]:
    """The series of ``name`` as TensorBoard's reader, csv and read_journal see it."""
    rows = _csv_rows(run / f"{name}.csv")
    assert rows[0] == ["step", name]
    assert all(len(row) == 2 for row in rows), [row for row in rows if len(row) != 2]
    return {
        "tensorboard": [(s, v) for s, v in _tb_series(run, name)],
        "csv": [(int(s), float(v)) for s, v in rows[1:]],
        "jsonl": _journal_series(run, name),
    }


def test_full_disk_then_space_again_keeps_every_file_whole_and_every_step(
    small_disk: Path, tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """On a disk that fills and then frees up, the journal, CSV and TensorBoard files parse with
    their own readers, nothing is torn or duplicated, and every step is there: what was logged
    while the disk was full is held (bounded) and written once space comes back."""
    monitor, steps = _train_through_a_full_disk(small_disk, tmp_path / "ref")
    assert monitor.dropped_events == 0
    run = small_disk / "run"
    for name, scale in (("loss", 8), ("acc", 1000)):
        for reader, series in _every_reader(run, name).items():
            expected = [(s, s / scale) for s in steps]
            if reader == "tensorboard":  # float32
                assert [s for s, _ in series] == steps, reader
                values = [v for _, v in series]
                assert values == pytest.approx([v for _, v in expected], rel=1e-6), reader
            else:
                assert series == expected, (reader, name)
    warnings = [w.getMessage() for w in _warnings(trainmon_log)]
    assert len(warnings) == 3, warnings  # once per writer on the full disk
    assert all("out of space" in w for w in warnings)


def test_full_disk_past_the_buffer_counts_what_it_drops(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a full disk lasts longer than the bounded buffer, what is given up is counted in
    trainmon/dropped_events, the files still parse, and the steps logged after space came back
    are all there."""
    from trainmon.writers import csv as csv_writer
    from trainmon.writers import jsonl, tensorboard

    monkeypatch.setattr(jsonl, "PENDING_BYTES", 2048)
    monkeypatch.setattr(tensorboard, "PENDING_BYTES", 2048)
    monkeypatch.setattr(csv_writer, "_PENDING_PER_FILE", 512)
    monitor, steps = _train_through_a_full_disk(small_disk, tmp_path / "ref")
    run = small_disk / "run"
    missing = 0
    for name, scale in (("loss", 8), ("acc", 1000)):
        for reader, series in _every_reader(run, name).items():
            found = [s for s, _ in series]
            assert found == sorted(set(found)), (reader, name)  # no step twice, in order
            assert found[:50] == steps[:50] and found[-100:] == steps[-100:], (reader, name)
            assert all(v == pytest.approx(s / scale, rel=1e-6) for s, v in series)
            missing += len(steps) - len(found)
    assert missing > 0
    assert missing <= monitor.dropped_events
    reference = _journal_series(tmp_path / "ref", DROPPED)
    assert reference and reference[-1][1] >= missing


# ---- a writer that hangs, and close() within its budget ---------------------------------------


class HungWriter(Writer):
    """A writer whose ``write`` blocks until the test releases it (a dead network mount)."""

    kind = "hung"
    location = "nowhere://hung"

    def __init__(self) -> None:
        self.release = threading.Event()

    def write(self, records: Sequence[StepScalars]) -> None:
        self.release.wait()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_hung_writer_costs_the_others_nothing_and_close_keeps_its_budget(
    tmp_path: Path, trainmon_log: list[logging.LogRecord]
) -> None:
    """A writer that blocks forever (with when_full "wait" and a small queue) neither starves the
    journal, which gets every value, nor makes each call wait: the loop loses at most one
    full_wait_s in all. What the hung writer misses is counted under its name, and close()
    returns within close_timeout_s, naming the hung writer in one warning."""
    hung = HungWriter()
    run = tmp_path / "run"
    full_wait_s, close_timeout_s = 0.5, 1.0
    monitor = Monitor(
        _config(
            trainmon={
                "queue_size": 50,
                "full_wait_s": full_wait_s,
                "close_timeout_s": close_timeout_s,
                "flush_interval_s": 0.05,
            }
        ),
        writers=[hung, JsonlWriter(run, "run")],
    )
    try:
        assert monitor.config.trainmon.when_full == "wait"
        total = 2000
        started = time.monotonic()
        for step in range(total):
            monitor.log({"loss": float(step)}, step=step)
        elapsed = time.monotonic() - started
        assert not monitor.flush(timeout=5)  # the hung writer could not flush: said so
        closing = time.monotonic()
        monitor.close()
        close_s = time.monotonic() - closing
    finally:
        hung.release.set()

    assert elapsed < 2 * full_wait_s + 1.0  # before: every call waited full_wait_s
    assert close_s < close_timeout_s + 0.5
    assert _journal_series(run, "loss") == [(step, float(step)) for step in range(total)]
    name = "hung writer (nowhere://hung)"
    assert monitor.undelivered[name] >= total - 50
    assert _journal_series(run, DROPPED)[-1][1] >= total - 50
    warned = [w.getMessage() for w in _warnings(trainmon_log) if name in w.getMessage()]
    assert len(warned) == 2, warned
    assert "detached" in warned[0]
    assert "not delivered" in warned[1] and "close_timeout_s = 1 s" in warned[1]


def test_close_timeout_s_is_checked() -> None:
    """trainmon.close_timeout_s must be a finite number of seconds >= 0, named in the error."""
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="trainmon.close_timeout_s"):
            Monitor(_config(trainmon={"close_timeout_s": bad}))
    assert Monitor(_config()).config.trainmon.close_timeout_s == 5.0


class PausingWriter(Writer):
    """A writer whose first ``write`` blocks for ``pause_s``, then keeps up; remembers steps."""

    kind = "pausing"
    location = "nowhere://pausing"

    def __init__(self, pause_s: float) -> None:
        self.pause_s = pause_s
        self.steps: list[int] = []

    def write(self, records: Sequence[StepScalars]) -> None:
        if self.pause_s:
            time.sleep(self.pause_s)
            self.pause_s = 0.0
        self.steps += [r.step for r in records if "loss" in r.values]

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_detached_writer_rejoins_once_it_caught_up(tmp_path: Path) -> None:
    """A writer that stalls for a while is detached (its misses counted, the journal keeps
    everything), and once it is back every later step reaches it again."""
    pausing = PausingWriter(pause_s=1.5)
    run = tmp_path / "run"
    monitor = Monitor(
        _config(trainmon={"queue_size": 50, "full_wait_s": 0.2, "flush_interval_s": 0.05}),
        writers=[pausing, JsonlWriter(run, "run")],
    )
    for step in range(1000):
        monitor.log({"loss": float(step)}, step=step)
    time.sleep(2.0)  # the pause ends and the writer drains what it holds
    assert monitor.flush(timeout=10)  # rejoined: flush waits for it again
    for step in range(1000, 1100):
        monitor.log({"loss": float(step)}, step=step)
    monitor.close()

    assert _journal_series(run, "loss") == [(s, float(s)) for s in range(1100)]
    assert pausing.steps[-100:] == list(range(1000, 1100))
    missed = 1000 - len([s for s in pausing.steps if s < 1000])
    assert missed > 0
    assert missed <= monitor.undelivered["pausing writer (nowhere://pausing)"]
