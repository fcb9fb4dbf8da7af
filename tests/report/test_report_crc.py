"""The TensorBoard reader checks CRCs: a flipped bit is damage, never data (unless --fast)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from trainmon.cli import main
from trainmon.report.loading import load_run


def _event_file(folder: Path, steps: int = 20) -> Path:
    """Scalars written by torch's SummaryWriter (as DeepSpeed writes them)."""
    SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    writer = SummaryWriter(str(folder))
    for step in range(1, steps + 1):
        writer.add_scalar("train/loss", 1.0, step)
    writer.close()
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def _records(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every TFRecord in ``data``."""
    found, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        found.append((pos, length))
        pos += 12 + length + 4
    return found


def test_a_flipped_bit_in_a_value_is_reported_and_not_read_as_data(tmp_path: Path) -> None:
    """Flip the top exponent bit of the 11th loss (1.0 becomes a huge number): the default
    read stops there and calls the file damaged; --fast reads the wrong value, as before."""
    path = _event_file(tmp_path)
    data = bytearray(path.read_bytes())
    offset, length = _records(bytes(data))[11]  # record 0 is the file_version event
    value_at = offset + 12 + length - 4  # simple_value: the record data's last 4 bytes
    assert struct.unpack_from("<f", data, value_at)[0] == 1.0
    data[value_at + 3] ^= 0x40
    path.write_bytes(bytes(data))
    run = load_run(tmp_path)
    values = run.series["train/loss"].values
    assert values == [1.0] * 10  # everything before the damaged record, nothing wrong
    assert any("damaged" in n and "still being written" in n for n in run.notes), run.notes
    fast = load_run(tmp_path, verify=False)
    assert len(fast.series["train/loss"].values) == 20
    assert max(fast.series["train/loss"].values) > 1e30  # what --fast cannot catch


def test_a_flipped_bit_in_a_length_is_damage_not_a_writer_still_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corrupted length field used to read as "a writer still running"; it is garbage."""
    path = _event_file(tmp_path)
    data = bytearray(path.read_bytes())
    offset, _ = _records(bytes(data))[5]
    data[offset + 6] ^= 0x01  # the length becomes ~2**48: past the end of the file
    path.write_bytes(bytes(data))
    assert main(["summary", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "damaged" in text and "still running" not in text
    run = load_run(tmp_path)
    assert run.series["train/loss"].values == [1.0] * 4
    fast = load_run(tmp_path, verify=False)
    assert any("still running" in n and "--fast" in n for n in fast.notes)
    assert main(["summary", "--fast", str(tmp_path)]) == 0
    assert "--fast skipped the CRC checks" in capsys.readouterr().out


def test_a_record_cut_short_is_still_a_writer_still_running(tmp_path: Path) -> None:
    """A file cut in the middle of its last record (CRCs of the length fine) keeps that note."""
    path = _event_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-6])
    run = load_run(tmp_path)
    assert len(run.series["train/loss"].values) == 19
    assert any("still running" in n for n in run.notes)
