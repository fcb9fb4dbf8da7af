"""The hand-encoded TensorBoard writer, checked against TensorBoard's own reader."""

from __future__ import annotations

import math
import os
import re
import struct
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event

import trainmon.extras
from trainmon.core.events import Number, StepScalars
from trainmon.errors import MissingExtraError
from trainmon.writers.tensorboard import TensorBoardWriter


def _read(directory: Path) -> EventAccumulator:
    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def _points(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _event_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("events.out.tfevents.*"))


def _raw_events(path: Path) -> Iterator[Event]:
    """Parse TFRecord framing directly (CRCs are left to the reader tests)."""
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        payload = data[offset + 12 : offset + 12 + length]
        offset += 12 + length + 4
        yield Event.FromString(payload)


def _write(directory: Path, records: list[StepScalars]) -> None:
    writer = TensorBoardWriter(directory)
    writer.write(records)
    writer.close()


def test_file_is_named_like_tensorboard_and_directory_is_created(tmp_path: Path) -> None:
    """The writer creates missing parents and names its file the way TensorBoard does."""
    directory = tmp_path / "a" / "b" / "run"
    writer = TensorBoardWriter(directory)
    writer.close()
    assert writer.kind == "tensorboard"
    assert writer.location == str(directory)
    [path] = _event_files(directory)
    pattern = rf"events\.out\.tfevents\.\d{{10}}\.[^/]+\.{os.getpid()}\.\d+"
    assert re.fullmatch(pattern, path.name)


def test_values_steps_and_wall_time_round_trip(tmp_path: Path) -> None:
    """Each step's values, step and wall time are read back by TensorBoard (float32 precision)."""
    records = [
        StepScalars(step, 1_700_000_000.25 + step, {"loss": 1.0 / (step + 1), "lr": 3e-4 * step})
        for step in range(50)
    ]
    _write(tmp_path, records)
    acc = _read(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["loss", "lr"]
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == list(range(50))
    for event, record in zip(loss, records, strict=True):
        assert event.wall_time == record.wall_time
        assert event.value == pytest.approx(record.values["loss"], rel=1e-6)
        assert event.value == _f32(record.values["loss"])
    assert [e.value for e in acc.Scalars("lr")] == [_f32(3e-4 * s) for s in range(50)]


def test_one_event_per_step_holds_all_its_metrics(tmp_path: Path) -> None:
    """The file starts with a brain.Event:2 version event, then one Event per StepScalars."""
    names = [f"group{i % 3}/metric_{i}" for i in range(40)]
    records = [StepScalars(s, 10.0 + s, {n: i * s for i, n in enumerate(names)}) for s in range(5)]
    _write(tmp_path, records)
    [path] = _event_files(tmp_path)
    events = list(_raw_events(path))
    assert events[0].file_version == "brain.Event:2"
    assert len(events) == 1 + len(records)
    for event, record in zip(events[1:], records, strict=True):
        assert event.step == record.step
        assert [v.tag for v in event.summary.value] == names
        assert [v.simple_value for v in event.summary.value] == [i * record.step for i in range(40)]
    acc = _read(tmp_path)
    assert len(acc.Tags()["scalars"]) == 40
    assert _points(acc, "group1/metric_7") == [(s, 7.0 * s) for s in range(5)]


def test_nan_and_infinities_round_trip(tmp_path: Path) -> None:
    """NaN, +Inf and -Inf are stored as such, not dropped or clamped."""
    _write(tmp_path, [StepScalars(0, 1.0, {"nan": math.nan, "inf": math.inf, "ninf": -math.inf})])
    acc = _read(tmp_path)
    assert math.isnan(acc.Scalars("nan")[0].value)
    assert acc.Scalars("inf")[0].value == math.inf
    assert acc.Scalars("ninf")[0].value == -math.inf


def test_ints_bools_and_out_of_float32_range_values(tmp_path: Path) -> None:
    """Ints and bools become floats; values beyond float32 (or float64) range become ±Inf."""
    values: dict[str, Number] = {
        "int": 7,
        "neg_int": -3,
        "true": True,
        "false": False,
        "big_int": 2**40,
        "big_float": 1e39,
        "neg_big_float": -1e300,
        "huge_int": 10**400,
        "neg_huge_int": -(10**400),
    }
    _write(tmp_path, [StepScalars(1, 1.0, values)])
    acc = _read(tmp_path)
    got = {tag: acc.Scalars(tag)[0].value for tag in values}
    assert got == {
        "int": 7.0,
        "neg_int": -3.0,
        "true": 1.0,
        "false": 0.0,
        "big_int": float(2**40),
        "big_float": math.inf,
        "neg_big_float": -math.inf,
        "huge_int": math.inf,
        "neg_huge_int": -math.inf,
    }


def test_negative_and_very_large_steps(tmp_path: Path) -> None:
    """Negative steps (10-byte two's complement varints) and steps like 2**40 round-trip."""
    steps = [-(2**40), -1, 0, 127, 128, 2**40, 2**62]
    _write(tmp_path, [StepScalars(s, 1.0, {"x": 1.0}) for s in steps])
    assert [step for step, _ in _points(_read(tmp_path), "x")] == steps


def test_unicode_and_hostile_tags_stay_inside_the_file(tmp_path: Path) -> None:
    """Tags like '../x', '/abs', 'a\\x00b' and 'é/ü' are tags in the file, never paths."""
    tags = ["../x", "/abs", "a\x00b", "é/ü", "..", "emoji 🚀", "x" * 5000]
    run = tmp_path / "run"
    _write(run, [StepScalars(3, 1.0, {t: float(i) for i, t in enumerate(tags)})])
    assert list(tmp_path.iterdir()) == [run]
    assert len(list(run.iterdir())) == 1
    acc = _read(run)
    assert sorted(acc.Tags()["scalars"]) == sorted(tags)
    for i, tag in enumerate(tags):
        assert _points(acc, tag) == [(3, float(i))]


def test_lone_surrogate_tag_is_escaped_not_fatal(tmp_path: Path) -> None:
    """A tag that is not encodable as UTF-8 is written backslash-escaped instead of failing."""
    _write(tmp_path, [StepScalars(0, 1.0, {"bad\ud800": 1.0, "good": 2.0})])
    acc = _read(tmp_path)
    assert _points(acc, "bad\\ud800") == [(0, 1.0)]
    assert _points(acc, "good") == [(0, 2.0)]


def test_close_is_idempotent_and_write_after_close_raises(tmp_path: Path) -> None:
    """A second close() does nothing; writing to a closed writer is an error, not silent loss."""
    writer = TensorBoardWriter(tmp_path)
    writer.write([StepScalars(0, 1.0, {"x": 1.0})])
    writer.close()
    writer.close()
    assert _points(_read(tmp_path), "x") == [(0, 1.0)]
    with pytest.raises(ValueError, match="closed"):
        writer.write([StepScalars(1, 1.0, {"x": 2.0})])


def test_write_buffers_and_flush_makes_data_visible_before_close(tmp_path: Path) -> None:
    """write() only buffers; flush() puts the data where a reader sees it while still open."""
    writer = TensorBoardWriter(tmp_path)
    [path] = _event_files(tmp_path)
    size = path.stat().st_size
    writer.write([StepScalars(s, 1.0, {"x": float(s)}) for s in range(3)])
    assert path.stat().st_size == size
    writer.flush()
    assert _points(_read(tmp_path), "x") == [(0, 0.0), (1, 1.0), (2, 2.0)]
    writer.close()


def test_large_buffer_flushes_by_itself(tmp_path: Path) -> None:
    """Once more than about 1 MiB is buffered, write() hands it to the OS without a flush()."""
    writer = TensorBoardWriter(tmp_path)
    [path] = _event_files(tmp_path)
    size = path.stat().st_size
    names = [f"metric_{i:04d}" for i in range(100)]
    writer.write([StepScalars(s, 1.0, dict.fromkeys(names, 0.5)) for s in range(1000)])
    assert path.stat().st_size > size + (1 << 20)
    writer.close()


def test_two_writers_in_one_directory_make_two_readable_files(tmp_path: Path) -> None:
    """Two writers in one process never share a file, and TensorBoard reads both files."""
    first = TensorBoardWriter(tmp_path)
    second = TensorBoardWriter(tmp_path)
    first.write([StepScalars(s, 1.0, {"a": float(s)}) for s in range(3)])
    second.write([StepScalars(s, 2.0, {"b": float(-s)}) for s in range(3, 6)])
    first.close()
    second.close()
    assert len(_event_files(tmp_path)) == 2
    acc = _read(tmp_path)
    assert _points(acc, "a") == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert _points(acc, "b") == [(3, -3.0), (4, -4.0), (5, -5.0)]


def test_truncated_final_record_keeps_earlier_steps(tmp_path: Path) -> None:
    """A file cut mid-record (a crash) still yields every complete step to TensorBoard."""
    _write(tmp_path, [StepScalars(s, 1.0, {"x": float(s), "y": 2.0 * s}) for s in range(5)])
    [path] = _event_files(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    acc = _read(tmp_path)
    assert _points(acc, "x") == [(s, float(s)) for s in range(4)]
    assert _points(acc, "y") == [(s, 2.0 * s) for s in range(4)]


def test_missing_crc32c_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the crc32c package the constructor raises MissingExtraError naming the pip extra."""
    monkeypatch.setattr(trainmon.extras, "is_installed", lambda module: module != "crc32c")
    with pytest.raises(MissingExtraError, match=re.escape('pip install "trainmon[tensorboard]"')):
        TensorBoardWriter(tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_crc32c_blocked_in_sys_modules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A crc32c import that cannot succeed is reported as the missing tensorboard extra."""
    monkeypatch.setitem(sys.modules, "crc32c", None)
    with pytest.raises(MissingExtraError) as info:
        TensorBoardWriter(tmp_path)
    assert 'pip install "trainmon[tensorboard]"' in str(info.value)
    assert info.value.package == "crc32c"


@settings(max_examples=60, deadline=None)
@given(
    values=st.dictionaries(
        st.text(min_size=1),
        st.floats(width=32, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=5,
    ),
    step=st.integers(min_value=0, max_value=2**53),
)
def test_arbitrary_tags_floats_and_steps_round_trip(values: dict[str, float], step: int) -> None:
    """Any text tag, any finite float32 value and any step in [0, 2**53] reads back exactly."""
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), [StepScalars(step, 12.5, values)])
        acc = _read(Path(folder))
        assert sorted(acc.Tags()["scalars"]) == sorted(values)
        for tag, value in values.items():
            [event] = acc.Scalars(tag)
            assert event.step == step
            assert event.wall_time == 12.5
            assert event.value == _f32(value)
