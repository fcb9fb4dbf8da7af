"""One validation path: ``trainmon validate``, ``Monitor`` and ``trainmon.initialize`` agree.

Every invalid config of :mod:`invalid_configs` is run through the CLI (a real config file) and
through ``Monitor(config)``; both must refuse it, with the same message.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import trainmon
from invalid_configs import INVALID, INVALID_FOR_INITIALIZE
from trainmon.cli import main
from trainmon.config import check_config


def _file(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))  # NaN and Infinity as Python's json writes them
    return str(path)


@pytest.mark.parametrize(("name", "config", "words"), INVALID, ids=[c[0] for c in INVALID])
def test_validate_and_monitor_give_the_same_verdict(
    name: str,
    config: dict[str, Any],
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI exits 2 with the message the Monitor raises (which names the key)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINMON_TEST_UNSET", raising=False)
    with pytest.raises(trainmon.ConfigError) as refused:
        trainmon.Monitor(config).close()
    assert words in str(refused.value)
    assert main(["validate", _file(tmp_path, config)]) == 2
    err = capsys.readouterr().err
    assert "config OK" not in err
    assert str(refused.value).split(": ", 1)[-1] in err


@pytest.mark.parametrize(
    ("name", "config", "words"), INVALID_FOR_INITIALIZE, ids=[c[0] for c in INVALID_FOR_INITIALIZE]
)
def test_sections_only_initialize_builds_are_problems_for_validate_and_errors_for_it(
    name: str,
    config: dict[str, Any],
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """initialize refuses before building anything; validate lists the same message as a
    problem (exit 1), since a DeepSpeed engine would build its own optimizer and scheduler."""
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(trainmon.ConfigError) as refused:
        trainmon.initialize(model=torch.nn.Linear(2, 2), config={**config})
    assert words in str(refused.value)
    assert main(["validate", _file(tmp_path, config)]) == 1
    out = capsys.readouterr().out
    assert "trainmon.initialize would refuse this config" in out
    assert str(refused.value) in out and "config OK" not in out


def test_optimizer_and_scheduler_are_described_not_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """optimizer/scheduler are said to be built by initialize; zero_optimization is listed
    as a DeepSpeed key trainmon does not use; a key nobody knows is listed as unknown."""
    config = {
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
        "zero_optimization": {"stage": 2},
        "my_own_notes": "x",
    }
    assert main(["validate", _file(tmp_path, config)]) == 0
    out = capsys.readouterr().out
    initialize = next(line for line in out.splitlines() if line.startswith("initialize"))
    assert "optimizer" in initialize and "scheduler" in initialize
    ignored = next(line for line in out.splitlines() if line.startswith("ignored"))
    assert "zero_optimization" in ignored and "optimizer" not in ignored
    unknown = next(line for line in out.splitlines() if line.startswith("unknown"))
    assert "my_own_notes" in unknown
    assert "config OK" in out


@pytest.mark.parametrize(
    ("key", "suggestion"), [("tensorbaord", "tensorboard"), ("step_per_print", "steps_per_print")]
)
def test_a_misspelt_top_level_key_is_a_validate_problem_and_a_monitor_warning(
    key: str,
    suggestion: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """validate lists the near-miss with the suggestion as a problem (exit 1: a typo that
    silently disables a section), --strict makes it exit 2, and the Monitor only logs the same
    warning (DeepSpeed accepts unknown keys)."""
    monkeypatch.chdir(tmp_path)
    config = {key: {"enabled": True} if "board" in key else 5}
    path = _file(tmp_path, config)
    assert main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert f"did you mean {suggestion!r}?" in out and f"{key!r}" in out
    assert main(["validate", "--strict", path]) == 2
    assert f"did you mean {suggestion!r}?" in capsys.readouterr().err
    (warning,) = check_config(config).warnings
    with caplog.at_level(logging.WARNING, logger="trainmon"):
        trainmon.Monitor(config).close()
    assert warning in caplog.text
