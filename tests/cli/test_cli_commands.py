"""The trainmon command on bad input: one clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainmon.cli import build_parser, main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m trainmon ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "trainmon", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("command", ["summary", "report", "tail"])
def test_a_path_with_no_run_is_exit_1_with_what_was_expected(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """An empty folder: exit 1, and the message says what a run folder holds."""
    assert main([command, str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trainmon {command}: {tmp_path}")
    assert "metrics.jsonl" in err


def test_compare_needs_both_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing second run is named in the error."""
    assert main(["compare", str(tmp_path), str(tmp_path / "missing")]) == 1
    assert "trainmon compare:" in capsys.readouterr().err


@pytest.mark.slow
def test_bad_input_never_shows_a_traceback(tmp_path: Path) -> None:
    """In a real process: an empty journal, a half-written one, garbage, a folder of images
    and histograms only — each gives a clear message and exit 1 (or a summary), no traceback."""
    from torch.utils.tensorboard import SummaryWriter

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_bytes(b"")
    half = tmp_path / "half"
    half.mkdir()
    (half / "metrics.jsonl").write_bytes(
        b'{"v":1,"kind":"scalars","step":1,"time":1.0,"values":{"train/loss":1.5}}\n{"v":1,"ki'
    )
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xff" * 100 + b"\n" + b"{]\n" * 3)
    images = tmp_path / "images"
    writer = SummaryWriter(str(images))
    writer.add_image("img", np.zeros((3, 4, 4)), 1)
    writer.add_histogram("h", np.arange(10.0), 1)
    writer.close()
    for path, code, words in (
        (empty, 1, "no metric values yet"),
        (garbage, 1, "no metric values yet"),
        (images, 1, "non-scalar"),
        (half, 0, "train/loss"),
        (tmp_path / "nothing-here", 1, "no such file or folder"),
    ):
        result = run_cli("summary", str(path))
        output = result.stdout + result.stderr
        assert result.returncode == code, output
        assert words in output, output
        assert "Traceback" not in output


def test_every_command_is_in_the_help() -> None:
    """`trainmon --help` lists demo, summary, tail, report, compare and validate."""
    text = build_parser().format_help()
    for command in ("demo", "summary", "tail", "report", "compare", "validate"):
        assert command in text


@pytest.mark.slow
def test_python_dash_m_and_the_console_script_entry_point_work(tmp_path: Path) -> None:
    """`python -m trainmon --version` and the `trainmon = trainmon.cli:main` entry point."""
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("trainmon ")
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="console_scripts") if e.name == "trainmon"]
    assert entry.value == "trainmon.cli:main" and entry.load() is main
