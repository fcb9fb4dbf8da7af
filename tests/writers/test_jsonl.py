"""The JSONL journal: schema v1, NaN kept distinct, tolerant reader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainmon.core.events import StepScalars
from trainmon.journal import read_journal
from trainmon.writers.jsonl import JsonlWriter


def test_every_line_is_standard_json_with_schema_version(tmp_path: Path) -> None:
    """Each line parses with the standard library, carries v=1, and NaN/Inf are strings."""
    writer = JsonlWriter(tmp_path, job="j", rank=0, world_size=1)
    writer.write([StepScalars(1, 10.5, {"a": math.nan, "b": -math.inf, "c": 2**70, "d": 1})])
    writer.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    parsed = [json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}")) for line in lines]
    assert parsed[0]["kind"] == "meta" and parsed[0]["job"] == "j" and parsed[0]["v"] == 1
    assert parsed[1] == {
        "v": 1,
        "kind": "scalars",
        "step": 1,
        "time": 10.5,
        "values": {"a": "NaN", "b": "-Infinity", "c": 2**70, "d": 1},
    }


def test_reader_decodes_and_skips_a_truncated_last_line(tmp_path: Path) -> None:
    """A journal cut mid-line by kill -9 reads back every complete record."""
    writer = JsonlWriter(tmp_path)
    writer.write([StepScalars(s, 0.0, {"loss": 1.0 / (s + 1)}) for s in range(3)])
    writer.close()
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(path.read_bytes() + b'{"v":1,"kind":"scal')
    records = [r for r in read_journal(path) if r["kind"] == "scalars"]
    assert [r["step"] for r in records] == [0, 1, 2]


def test_reader_reports_corruption_in_the_middle(tmp_path: Path) -> None:
    """A bad line that is not the last is an error naming the file and line."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"v":1,"kind":"meta"}\nnot json\n{"v":1,"kind":"scalars","step":1,"values":{}}\n'
    )
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        list(read_journal(path))


def test_restart_after_crash_starts_a_clean_line(tmp_path: Path) -> None:
    """A writer opening a journal that ends mid-line starts on a new line and adds a meta record."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"v":1,"kind":"meta"}\n{"v":1,"kind":"scal')
    writer = JsonlWriter(tmp_path)
    writer.write([StepScalars(7, 0.0, {"loss": 0.5})])
    writer.close()
    assert len(path.read_text().splitlines()) == 4
    records = list(read_journal(path))
    assert [r["kind"] for r in records] == ["meta", "meta", "scalars"]
    assert records[-1]["values"] == {"loss": 0.5}
