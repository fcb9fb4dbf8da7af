"""`trainmon validate CONFIG`: the effective monitoring setup, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainmon.cli import main


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """Write a JSON config file."""
    path.write_text(json.dumps(config))
    return path


def deepspeed_config(base: Path) -> dict[str, Any]:
    """A DeepSpeed config with trainmon's writers, per-rank output and an alerts section."""
    return {
        "train_batch_size": 64,
        "steps_per_print": 25,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 2},
        "tensorboard": {"enabled": True, "output_path": str(base / "tb"), "job_name": "exp"},
        "csv_monitor": {"enabled": True, "output_path": "relative/csv", "job_name": "exp"},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "exp", "every": "window"},
        "trainmon": {"per_rank_output": True, "window_steps": 50},
        "alerts": {
            "rules": [
                {"name": "grad-explosion", "metric": "train/grad_norm", "op": ">", "threshold": 10},
                {
                    "name": "nan-loss",
                    "kind": "non_finite",
                    "metric": "train/loss",
                    "action": "stop",
                },
                {"name": "stalled", "kind": "stall", "seconds": 600},
            ],
            "sinks": [
                {"type": "file", "path": str(base / "alerts.jsonl")},
                {"type": "webhook", "url": "https://hooks.example.com/T000/secret-token"},
            ],
        },
    }


def test_prints_writers_with_resolved_paths_ranks_window_and_rules(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each enabled writer with its absolute folder, per-rank output, the window, the cross-rank
    mode, the ignored DeepSpeed keys and each alert rule; no secret of a sink is printed."""
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "ds.json", deepspeed_config(tmp_path))
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"config       {config.resolve()}" in out
    assert (
        f"tensorboard  {(tmp_path / 'tb' / 'exp').resolve()}/rank-<r>/events.out.tfevents.*" in out
    )
    assert f"csv_monitor  {(tmp_path / 'relative' / 'csv' / 'exp').resolve()}/rank-<r>/" in out
    assert f"jsonl        {(tmp_path / 'exp').resolve()}/rank-<r>/metrics.jsonl" in out
    assert "(every window" in out and "every rank writes" in out
    assert "console      stdout, one line every 25 steps" in out
    assert "window       50 steps (trainmon.window_steps)" in out
    assert "optimizer" in out and "zero_optimization" in out  # ignored, and said so
    assert "grad-explosion" in out and "train/grad_norm > 10" in out
    assert "train/loss is NaN or Inf" in out and "stops training" in out
    assert "no step completed for 600" in out
    assert "https://hooks.example.com/***" in out and "secret-token" not in out
    assert out.rstrip().endswith("config OK")


def test_a_minimal_config_says_rank_0_and_no_alerts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defaults: rank 0 writes, console every 10 steps (DeepSpeed's default), no rules."""
    config = write_config(tmp_path / "c.json", {"train_batch_size": 8})
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert "rank 0 writes" in out and "one line every 10 steps" in out
    assert "window       10 steps (steps_per_print)" in out
    assert "alerts       no rules" in out or "alerts       none" in out


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tensorboard": {"enabled": True, "outptu_path": "x"}}, "did you mean 'output_path'"),
        ({"steps_per_print": "often"}, "'steps_per_print' = 'often': expected an integer"),
        ({"alerts": {"rules": [{"name": "x", "metric": "a", "op": ">"}]}}, "threshold"),
    ],
)
def test_an_invalid_config_is_one_clear_message_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: dict[str, Any],
    message: str,
) -> None:
    """A wrong key, type or rule: exit 2 with the config error (key, value, fix), no traceback."""
    path = write_config(tmp_path / "bad.json", config)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmon validate: ") and message in err
    assert "Traceback" not in err


def test_a_missing_or_unparsable_file_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file and a file that is not JSON each name the file."""
    assert main(["validate", str(tmp_path / "nope.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{not json")
    assert main(["validate", str(tmp_path / "broken.json")]) == 2
    assert "could not be parsed" in capsys.readouterr().err


def test_problems_that_would_stop_a_writer_are_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output folder under a regular file, and a writer whose package is missing: listed as
    problems with the pip command, exit 1."""
    import trainmon.cli.validate as validate

    monkeypatch.setattr(validate, "is_installed", lambda module: module != "crc32c")
    (tmp_path / "afile").write_text("")
    config = write_config(
        tmp_path / "c.json",
        {
            "jsonl": {
                "enabled": True,
                "output_path": str(tmp_path / "afile" / "x"),
                "job_name": "j",
            },
            "tensorboard": {"enabled": True, "output_path": str(tmp_path), "job_name": "j"},
        },
    )
    assert main(["validate", str(config)]) == 1
    out = capsys.readouterr().out
    assert "problems:" in out
    assert "jsonl: cannot write there" in out and "is a file" in out
    assert "tensorboard: the 'crc32c' package is not installed" in out
    assert 'pip install "trainmon[tensorboard]"' in out


def test_other_enabled_backends_are_listed_from_the_writer_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every enabled backend of trainmon.writers.BACKENDS gets a line saying where it writes."""
    from trainmon import writers

    config = write_config(tmp_path / "c.json", {"wandb": {"enabled": True, "project": "proj"}})
    main(["validate", str(config)])
    out = capsys.readouterr().out
    assert any(b.section == "wandb" for b in writers.BACKENDS)
    assert "  wandb        " in out and "proj" in out
