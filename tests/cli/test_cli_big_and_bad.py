"""The CLI on big and bad inputs: report targets that are not regular files, tail of a long
journal, a report of very many runs."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from trainmon.cli import main


def _journal(folder: Path, steps: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"v": 1, "kind": "scalars", "step": s, "time": float(s), "values": {"x": 1 / s}})
        for s in range(1, steps + 1)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_report_refuses_a_device_node_and_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o /dev/null (a character device) and -o FIFO are refused with exit 1, naming what
    they are; both are still what they were afterwards."""
    run = _journal(tmp_path / "run")
    before = os.stat("/dev/null")
    assert main(["report", str(run), "-o", "/dev/null"]) == 1
    err = capsys.readouterr().err
    assert "/dev/null" in err and "character device" in err and "not a regular file" in err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["report", str(run), "-o", str(fifo)]) == 1
    assert "named pipe" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert main(["report", str(run), "-o", str(folder)]) == 1
    assert "a folder" in capsys.readouterr().err


def test_report_writes_through_a_symlink_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink to a regular file stays a link; the file it points to gets the report; a
    link to a device or a dangling link is refused."""
    run = _journal(tmp_path / "run")
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert main(["report", str(run), "-o", str(link)]) == 0
    out = capsys.readouterr().out
    assert f"through the symlink {link}" in out and str(real) in out
    assert link.is_symlink() and "<html" in real.read_text()
    to_device = tmp_path / "null.html"
    to_device.symlink_to("/dev/null")
    assert main(["report", str(run), "-o", str(to_device)]) == 1
    assert "symlink" in capsys.readouterr().err and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "missing" / "x.html")
    assert main(["report", str(run), "-o", str(dangling)]) == 1
    assert "dangling" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
