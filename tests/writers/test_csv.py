"""The CSV writer: DeepSpeed's csv_monitor layout, restart-safe, bounded open files."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from trainmon.core.events import StepScalars
from trainmon.writers import csv as csv_module
from trainmon.writers.csv import CsvWriter


def read(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_deepspeed_file_names_and_headers(tmp_path: Path) -> None:
    """File per metric named with '/' and spaces as '_', header 'step,<last component>'."""
    writer = CsvWriter(tmp_path)
    writer.write([StepScalars(5, 0.0, {"Train/Samples/train loss": 0.5, "lr": 1e-4})])
    writer.close()
    assert read(tmp_path / "Train_Samples_train_loss.csv") == [["step", "train loss"], ["5", "0.5"]]
    assert read(tmp_path / "lr.csv") == [["step", "lr"], ["5", "0.0001"]]


def test_restart_appends_without_second_header(tmp_path: Path) -> None:
    """A second writer on the same folder appends rows and writes no second header."""
    for start in (0, 10):
        writer = CsvWriter(tmp_path)
        writer.write([StepScalars(start + i, 0.0, {"train/loss": float(i)}) for i in range(3)])
        writer.close()
    rows = read(tmp_path / "train_loss.csv")
    assert rows[0] == ["step", "loss"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "2", "10", "11", "12"]


def test_line_cut_by_a_crash_is_not_glued_to_the_next(tmp_path: Path) -> None:
    """After a killed run left half a line, the next row starts on a line of its own."""
    (tmp_path / "train_loss.csv").write_text("step,loss\n0,1.0\n1,0.")
    writer = CsvWriter(tmp_path)
    writer.write([StepScalars(2, 0.0, {"train/loss": 0.25})])
    writer.close()
    assert read(tmp_path / "train_loss.csv")[-1] == ["2", "0.25"]


def test_colliding_names_get_separate_files(tmp_path: Path) -> None:
    """'a/b' and 'a_b' would share a file under DeepSpeed's rule; here each keeps its own."""
    writer = CsvWriter(tmp_path)
    writer.write([StepScalars(1, 0.0, {"a/b": 1.0, "a_b": 2.0})])
    writer.close()
    files = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert len(files) == 2 and "a_b.csv" in files
    values = sorted(read(tmp_path / name)[1][1] for name in files)
    assert values == ["1.0", "2.0"]


def test_exact_values_and_quoted_headers(tmp_path: Path) -> None:
    """Floats keep every digit, ints stay ints, and a header with a comma is quoted."""
    writer = CsvWriter(tmp_path)
    writer.write([StepScalars(1, 0.0, {"x/a,b": 0.1 + 0.2, "n": 2**62})])
    writer.close()
    assert read(tmp_path / "x_a,b.csv") == [["step", "a,b"], ["1", repr(0.1 + 0.2)]]
    assert read(tmp_path / "n.csv")[1] == ["1", str(2**62)]


def test_every_value_is_written_as_python_spells_it(tmp_path: Path) -> None:
    """Whole columns are formatted at once in C; the bytes stay ``repr``'s (DeepSpeed's own
    files), for small exponents, huge ints, NaN and Inf too: each column reads back as the
    ``repr`` of each value and parses to the value itself."""
    rng = random.Random(5)
    columns: dict[str, list[float | int]] = {
        "plain": [rng.uniform(-1e3, 1e3) for _ in range(50)],
        "lr": [3e-05 * (1 + s % 3) for s in range(50)],  # 3e-05: an exponent in repr
        "tiny": [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(50)],
        "ints": [rng.randint(-(10**6), 10**6) for _ in range(50)],
        "huge": [2**70 + s for s in range(50)],  # beyond 64 bits
        "odd": [[math.nan, math.inf, -math.inf, -0.0, 5e-324][s % 5] for s in range(50)],
        "near": [1.00001, 0.0001, 1e16, 1e15, 0.1 + 0.2] * 10,
    }
    writer = CsvWriter(tmp_path)
    writer.write(
        [StepScalars(s, 0.0, {name: col[s] for name, col in columns.items()}) for s in range(50)]
    )
    writer.close()
    for name, column in columns.items():
        rows = read(tmp_path / f"{name}.csv")[1:]
        assert rows == [[str(s), repr(v)] for s, v in enumerate(column)], name
        for (_, text), value in zip(rows, column, strict=True):
            back = int(text) if type(value) is int else float(text)
            assert back == value or (math.isnan(back) and math.isnan(value)), (name, text)


def test_names_that_come_go_and_change_order_keep_each_file_in_step_order(
    tmp_path: Path,
) -> None:
    """One batch whose records carry other names, or the same names in another order, from
    step to step (an eval metric every few steps): each file gets exactly its name's rows,
    in step order."""
    records = []
    for step in range(1, 40):
        values: dict[str, float] = {"loss": step / 2, "lr": step * 1e-5}
        if step % 4 == 0:
            values["eval/acc"] = step / 100
        if step % 3 == 0:
            values = dict(reversed(values.items()))
        records.append(StepScalars(step, 0.0, values))
    writer = CsvWriter(tmp_path)
    writer.write(records)
    writer.close()
    for name, file_name in (("loss", "loss.csv"), ("lr", "lr.csv"), ("eval/acc", "eval_acc.csv")):
        expected = [[str(r.step), repr(r.values[name])] for r in records if name in r.values]
        assert read(tmp_path / file_name)[1:] == expected


def test_open_files_are_bounded(tmp_path: Path, monkeypatch: object) -> None:
    """With more metrics than the open-file limit, every value still lands in its file."""
    import pytest

    mp = pytest.MonkeyPatch()
    mp.setattr(csv_module, "MAX_OPEN_FILES", 4)
    try:
        writer = CsvWriter(tmp_path)
        for step in range(3):
            writer.write([StepScalars(step, 0.0, {f"m/{i}": float(i * step) for i in range(10)})])
        assert len(writer._open) <= 4
        writer.close()
    finally:
        mp.undo()
    for i in range(10):
        assert read(tmp_path / f"m_{i}.csv")[1:] == [[str(s), repr(float(i * s))] for s in range(3)]


def test_colliding_names_keep_their_files_across_restarts(tmp_path: Path) -> None:
    """'a/b', 'a_b' and 'a b' never share a file, even when restarted runs log them in a
    different order: each name's rows all sit in one file whose header is its own."""
    orders = [["a/b"], ["a_b", "a/b"], ["a b", "a_b", "a/b"], ["a/b", "a b", "a_b"]]
    for run, names in enumerate(orders):
        writer = CsvWriter(tmp_path)
        for name in names:
            writer.write([StepScalars(run, 0.0, {name: float(len(name) * 100 + run)})])
        writer.close()
    by_file = {p.name: read(p) for p in tmp_path.glob("*.csv")}
    assert len(by_file) == 3
    wanted = {
        "a/b": [[str(r), str(300.0 + r)] for r in range(4)],
        "a_b": [[str(r), str(300.0 + r)] for r in (1, 2, 3)],
        "a b": [[str(r), str(300.0 + r)] for r in (2, 3)],
    }
    found = sorted((rows[0][1], rows[1:]) for rows in by_file.values())
    expected = sorted((name.rsplit("/", 1)[-1], rows) for name, rows in wanted.items())
    assert found == expected
    assert csv_module.read_name_map(tmp_path)["a/b"] == "a_b.csv"
