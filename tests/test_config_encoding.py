"""Config files that are not UTF-8: one ConfigError naming the file, the byte and the fix, from
``Monitor`` and from ``trainmon validate`` alike (exit 2), never a bare UnicodeDecodeError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trainmon
from trainmon.cli import main
from trainmon.errors import ConfigError

# (file name, bytes, offset of the first byte that is not UTF-8, what the message guesses)
NOT_UTF8 = [
    ("utf16.json", b'\xff\xfe{"x": 1}', 0, "UTF-16 byte-order mark"),
    ("latin1.json", '{\n  "job_name": "café"\n}'.encode("latin-1"), 20, "Latin-1"),
    ("latin1.yaml", "steps_per_print: 10\njob_name: é\n".encode("latin-1"), 30, "Latin-1"),
]


def _assert_explains(message: str, path: Path, offset: int, guess: str) -> None:
    assert repr(str(path)) in message, message
    assert f"byte offset {offset}" in message and "not UTF-8" in message, message
    assert guess in message and "must be UTF-8 JSON or YAML" in message, message
    assert "UnicodeDecodeError" not in message and "please report" not in message, message


@pytest.mark.parametrize(("name", "data", "offset", "guess"), NOT_UTF8)
def test_monitor_refuses_a_config_that_is_not_utf8_naming_the_file_and_byte(
    tmp_path: Path, name: str, data: bytes, offset: int, guess: str
) -> None:
    """Monitor(path) raises ConfigError naming the file, the byte offset and UTF-8 JSON/YAML."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        trainmon.Monitor(str(path))
    _assert_explains(str(caught.value), path, offset, guess)
    assert caught.value.__cause__ is None  # the decoder's traceback adds nothing to act on


@pytest.mark.parametrize(("name", "data", "offset", "guess"), NOT_UTF8)
def test_validate_refuses_a_config_that_is_not_utf8_with_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    data: bytes,
    offset: int,
    guess: str,
) -> None:
    """``trainmon validate`` lists the same mistake and exits 2, not "unexpected error" (1)."""
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "refused, 1 mistake" in captured.err
    _assert_explains(captured.err, path, offset, guess)


def test_validate_as_a_process_exits_2_on_a_utf16_config(tmp_path: Path) -> None:
    """``python -m trainmon validate`` on a UTF-16 file: exit 2 and the message on stderr."""
    path = tmp_path / "ds_config.json"
    path.write_bytes(b'\xff\xfe{"x": 1}')
    done = subprocess.run(
        [sys.executable, "-m", "trainmon", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    _assert_explains(done.stderr, path, 0, "UTF-16 byte-order mark")
