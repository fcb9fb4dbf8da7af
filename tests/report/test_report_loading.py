"""Reading runs back: trainmon's journal, TensorBoard folders (DeepSpeed's tags included), and
the bad input a killed or foreign run leaves behind."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon
from trainmon.report import RunError, load_run, summarize


def journal_run(folder: Path, steps: int, job: str = "job") -> Path:
    """A small journal written by trainmon.Monitor; returns the run folder."""
    config = {
        "steps_per_print": 10,
        "jsonl": {"enabled": True, "output_path": str(folder), "job_name": job},
        "console": {"enabled": False},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, steps + 1):
            monitor.step = step
            loss = math.nan if step == 7 else 1.0 / step
            monitor.write_events([("train/loss", loss), ("perf/step_time_ms", 10.0 + step)])
    return folder / job


def ea_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a folder, read by TensorBoard's own EventAccumulator."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_journal_reads_back_every_value_nan_included(tmp_path: Path) -> None:
    """A Monitor-written journal yields each metric's steps and values, NaN as NaN."""
    run = load_run(journal_run(tmp_path, 30))
    assert run.source == "trainmon journal" and run.name == "job" and run.notes == []
    loss = run.series["train/loss"]
    assert loss.steps == list(range(1, 31))
    assert math.isnan(loss.values[6])
    assert list(loss.values[:6]) == [1.0 / s for s in range(1, 7)]
    assert run.series["perf/step_time_ms"].values[-1] == 40.0
    assert len(run.windows) == 3 and run.step_count == 30


def test_the_journal_file_itself_and_the_parent_folder_are_accepted(tmp_path: Path) -> None:
    """RUN may be metrics.jsonl, its folder, or the output_path holding one job folder."""
    folder = journal_run(tmp_path, 5)
    for path in (folder / "metrics.jsonl", folder, tmp_path):
        assert load_run(path).series["train/loss"].steps == [1, 2, 3, 4, 5]


def test_a_killed_run_reads_up_to_its_last_complete_line(tmp_path: Path) -> None:
    """A journal cut mid-line loads every complete line and says so in its notes."""
    folder = journal_run(tmp_path, 20)
    journal = folder / "metrics.jsonl"
    data = journal.read_bytes()
    journal.write_bytes(data + b'{"v": 1, "kind": "scalars", "step": 21, "values": {"train/lo')
    run = load_run(folder)
    assert run.series["train/loss"].steps[-1] == 20
    assert any("cut short" in note for note in run.notes)


def test_a_corrupt_line_in_the_middle_is_skipped_and_noted(tmp_path: Path) -> None:
    """A garbage line between good ones is skipped; the note names its line number."""
    folder = journal_run(tmp_path, 5)
    journal = folder / "metrics.jsonl"
    lines = journal.read_bytes().split(b"\n")
    lines.insert(2, b"\x00\x01 not json")
    journal.write_bytes(b"\n".join(lines))
    run = load_run(folder)
    assert len(run.series["train/loss"]) == 5
    assert any("unreadable line" in note and "line 3" in note for note in run.notes)


def test_a_restarted_run_keeps_the_latest_value_of_a_repeated_step(tmp_path: Path) -> None:
    """Two starts logging overlapping steps merge in step order, the later value winning."""
    journal_run(tmp_path, 10)
    config = {
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "console": {"enabled": False},
    }
    with trainmon.Monitor(config) as monitor:  # resumed from a checkpoint at step 8
        for step in range(8, 13):
            monitor.step = step
            monitor.write_events([("train/loss", 100.0 + step)])
    loss = load_run(tmp_path / "job").series["train/loss"]
    assert loss.steps == list(range(1, 13))
    assert list(loss.values[7:]) == [108.0, 109.0, 110.0, 111.0, 112.0]
    assert any("restarts" in note for note in load_run(tmp_path / "job").notes)


def test_an_empty_journal_is_a_clear_error(tmp_path: Path) -> None:
    """A journal with only its meta line (or nothing) has no metrics: RunError says so."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "metrics.jsonl").write_bytes(b"")
    run = load_run(folder)
    with pytest.raises(RunError, match="no metric values yet"):
        run.require_metrics()


@pytest.mark.parametrize("make", ["missing", "empty", "other-file"])
def test_a_path_without_a_run_is_a_clear_error(tmp_path: Path, make: str) -> None:
    """A missing path, a folder with no run and an unrelated file each raise RunError."""
    path = tmp_path / "x"
    if make == "empty":
        path.mkdir()
    elif make == "other-file":
        path.write_text("hello")
    with pytest.raises(RunError, match=str(path)):
        load_run(path)


def deepspeed_folder(folder: Path, steps: int = 60) -> dict[str, list[tuple[int, float]]]:
    """Events as DeepSpeed writes them (torch SummaryWriter, Train/Samples/* tags, x = samples),
    plus histograms, images and text that a reader must skip."""
    from torch.utils.tensorboard import SummaryWriter

    logged: dict[str, list[tuple[int, float]]] = {}
    writer = SummaryWriter(str(folder))
    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        samples = 32 * step
        for tag, value in (
            ("Train/Samples/train_loss", 4.0 / step),
            ("Train/Samples/lr", 1e-4 * step),
            ("Train/Samples/loss_scale", 65536.0),
            ("Train/Samples/elapsed_time_ms_forward", 10.0 + step % 3),
            ("Train/Samples/elapsed_time_ms_backward", 20.0),
            ("Train/Samples/elapsed_time_ms_step", 5.0),
        ):
            writer.add_scalar(tag, value, samples)
            logged.setdefault(tag, []).append((samples, value))
        if step % 20 == 0:
            writer.add_histogram("weights", rng.standard_normal(50), samples)
            writer.add_image("sample", rng.random((3, 4, 4)), samples)
            writer.add_text("notes", "text", samples)
    writer.close()
    return logged


def test_a_deepspeed_tensorboard_folder_reads_like_tensorboard_does(tmp_path: Path) -> None:
    """Every scalar equals what TensorBoard's own EventAccumulator reads; x is samples;
    histograms, images and text are skipped with a note."""
    deepspeed_folder(tmp_path / "ds")
    run = load_run(tmp_path / "ds")
    expected = ea_scalars(tmp_path / "ds")
    assert set(run.series) == set(expected)
    for tag, points in expected.items():
        series = run.series[tag]
        assert series.steps == [s for s, _ in points]
        assert series.values == [v for _, v in points]
        assert series.x_unit == "samples"
    assert run.x_unit == "samples" and run.source == "TensorBoard events"
    assert any("non-scalar" in note for note in run.notes)


def test_deepspeed_tags_fill_the_summary(tmp_path: Path) -> None:
    """DeepSpeed's train_loss and elapsed_time_ms_* tags become the loss and the breakdown."""
    logged = deepspeed_folder(tmp_path / "ds")
    s = summarize(load_run(tmp_path / "ds"))
    assert s.x_unit == "samples"
    assert s.loss is not None and s.loss["final"] == pytest.approx(4.0 / 60, rel=1e-6)
    parts = {p.label: p for p in s.breakdown}
    assert set(parts) == {"forward", "backward", "optimizer"}
    forward = [v for _, v in logged["Train/Samples/elapsed_time_ms_forward"]]
    total = sum(forward) / len(forward) + 20.0 + 5.0
    assert parts["forward"].percent == pytest.approx(100 * (sum(forward) / len(forward)) / total)
    assert s.breakdown_of == "the sum of the parts"
    acc = EventAccumulator(str(tmp_path / "ds"), size_guidance={"scalars": 0})
    acc.Reload()
    events = [e for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
    seconds = max(e.wall_time for e in events) - min(e.wall_time for e in events)
    (rate,) = s.throughput  # DeepSpeed logs no throughput: samples over wall time
    assert rate.label == "samples/s"
    assert rate.value == pytest.approx((32 * 60 - 32) / seconds, rel=1e-6)


def test_tensor_encoded_scalars_are_read(tmp_path: Path) -> None:
    """Scalars written as 0-d float/double tensors (TensorBoard 2 style) are read, with the
    values EventAccumulator gives."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "tb2"))
    for step in range(5):
        writer.add_event(
            event_pb2.Event(step=step, wall_time=1.0 + step, summary=scalar_pb("acc", step / 4))
        )
        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE, tensor_content=struct.pack("<d", 1.0 / (step + 1))
        )
        value = summary_pb2.Summary.Value(tag="raw_double", tensor=tensor)
        writer.add_event(
            event_pb2.Event(
                step=step, wall_time=1.0 + step, summary=summary_pb2.Summary(value=[value])
            )
        )
    writer.close()
    run = load_run(tmp_path / "tb2")
    assert run.series["acc"].values == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert run.series["raw_double"].values == [1.0 / (s + 1) for s in range(5)]
    assert run.start_time == 1.0 and run.end_time == 5.0


def test_a_truncated_event_file_keeps_every_complete_record(tmp_path: Path) -> None:
    """An event file cut mid-record (a killed writer) yields every complete record."""
    logged = deepspeed_folder(tmp_path / "ds", steps=10)
    (event_file,) = (tmp_path / "ds").iterdir()
    data = event_file.read_bytes()
    event_file.write_bytes(data[:-7])
    run = load_run(tmp_path / "ds")
    loss = run.series["Train/Samples/train_loss"]
    assert loss.steps == [s for s, _ in logged["Train/Samples/train_loss"]][: len(loss.steps)]
    assert len(loss.steps) >= 9
    assert any("cut short" in note for note in run.notes)


def test_trainmon_tensorboard_output_matches_its_journal(tmp_path: Path) -> None:
    """trainmon's own event files (all of a step's scalars in one event) read back the same
    values as its journal, float32-rounded."""
    config = {
        "tensorboard": {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "j"},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "j"},
        "console": {"enabled": False},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(50):
            monitor.step = step
            monitor.write_events([("train/loss", 1 / (step + 1)), ("train/lr", 3e-4)])
    tb = load_run(tmp_path / "tb" / "j")
    journal = load_run(tmp_path / "j")
    for name in ("train/loss", "train/lr"):
        assert tb.series[name].steps == journal.series[name].steps
        expected = [
            struct.unpack("<f", struct.pack("<f", v))[0] for v in journal.series[name].values
        ]
        assert tb.series[name].values == expected
    assert tb.series["train/loss"].x_unit == "step"


def test_two_folders_with_the_same_tag_are_both_kept(tmp_path: Path) -> None:
    """Event files in two sub-folders with a common tag: each keeps its values, prefixed."""
    from torch.utils.tensorboard import SummaryWriter

    for name, value in (("a", 1.0), ("b", 2.0)):
        writer = SummaryWriter(str(tmp_path / "logs" / name))
        writer.add_scalar("loss", value, 1)
        writer.add_scalar(f"only_{name}", value, 1)
        writer.close()
    run = load_run(tmp_path / "logs")
    assert run.series["a/loss"].values == [1.0] and run.series["b/loss"].values == [2.0]
    assert "only_a" in run.series and "only_b" in run.series
    assert any("prefixed" in note for note in run.notes)


def test_non_numbers_in_a_foreign_journal_are_skipped(tmp_path: Path) -> None:
    """Values that are not numbers (null, text, lists) are dropped with a note, not raised."""
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(
        '{"v": 1, "kind": "scalars", "step": 1, "values": {"a": 1.5, "b": "Infinity"}}\n'
        '{"v": 1, "kind": "scalars", "step": 2, "values": {"a": null, "b": [1]}}\n'
        '{"v": 1, "kind": "scalars", "step": "3", "values": {"a": 1}}\n'
        '{"v": 1, "kind": "future-kind", "anything": true}\n'
        '["not", "an", "object"]\n'
        '{"v": 1, "kind": "scalars", "step": 4, "values": {"a": 2, "b": 3}}\n'
    )
    run = load_run(folder)
    assert run.series["a"].steps == [1, 4] and run.series["a"].values == [1.5, 2.0]
    assert run.series["b"].values == [math.inf, 3.0]
    assert any("not numbers" in note for note in run.notes)
    assert any("unreadable" in note for note in run.notes)
