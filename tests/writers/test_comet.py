"""The Comet writer against the real ``comet_ml`` SDK in its offline mode.

Comet's offline mode writes each experiment as a zip (``experiment.json`` and one message a line
in ``messages.json``) to upload later; the tests read that archive back (``comet_offline.py``)
and check DeepSpeed's start arguments and ``samples_log_interval`` rule on what Comet stored. No
API key is set, so an online start fails at once, as on a machine without Comet credentials.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
from comet_offline import comet_offline, only_experiment, read_offline, same_number

import trainmon
import trainmon.extras
from trainmon.config import CometConfig
from trainmon.core.events import StepScalars
from trainmon.core.place import ProcessPlace
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.journal import read_journal

__all__ = ["comet_offline"]  # the fixture, imported for pytest

pytestmark = pytest.mark.slow  # each experiment starts Comet's threads and archives at the end


def _config(base: Path, **comet: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "comet": {"enabled": True, "online": False, **comet},
    }


def test_deepspeed_keys_reach_the_stored_experiment(tmp_path: Path, comet_offline: Path) -> None:
    """project, workspace and experiment_name (DeepSpeed's keys) are what Comet stored, and the
    writer names the experiment's archive folder as its location."""
    config = _config(tmp_path, project="proj", workspace="ws", experiment_name="my-experiment")
    with trainmon.Monitor(config) as monitor:
        (writer,) = [w for w in monitor.writers if w.kind == "comet"]
        monitor.log({"train/loss": 0.5}, step=3)
    stored = only_experiment(comet_offline)
    assert stored.experiment["project_name"] == "proj"
    assert stored.experiment["workspace"] == "ws"
    assert stored.name == "my-experiment"
    assert stored.logged() == {3: {"train/loss": 0.5}}
    assert writer.location


def test_the_project_keyword_follows_the_sdk() -> None:
    """comet_ml.start takes the project as project_name in newer SDKs and project in older
    ones (DeepSpeed's); the writer asks the signature which."""
    from types import ModuleType

    from trainmon.writers.comet import project_keyword

    new, old = ModuleType("new"), ModuleType("old")

    def start_new(api_key: Any = None, project_name: Any = None) -> None: ...
    def start_old(api_key: Any = None, project: Any = None) -> None: ...

    new.start, old.start = start_new, start_old  # type: ignore[attr-defined]
    assert (project_keyword(new), project_keyword(old)) == ("project_name", "project")


def test_samples_log_interval_follows_deepspeed_per_metric(
    tmp_path: Path, comet_offline: Path
) -> None:
    """A metric is logged when first seen and then once its step has moved on by at least
    samples_log_interval since it was last logged, each metric on its own schedule."""
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=100)) as monitor:
        lr_at = {150: 0.5, 260: 0.25, 350: 0.125}  # first seen at 150; 260 is 110 later,
        # 350 only 90 after 260
        for step in (0, 50, 100, 150, 199, 250, 260, 350):
            values = {"Train/Samples/train_loss": step / 1000}
            if step in lr_at:
                values["Train/Samples/lr"] = lr_at[step]
            if step == 260:
                del values["Train/Samples/train_loss"]
            monitor.log(values, step=step)
    assert only_experiment(comet_offline).logged() == {
        0: {"Train/Samples/train_loss": 0.0},
        100: {"Train/Samples/train_loss": 0.1},
        150: {"Train/Samples/lr": 0.5},
        250: {"Train/Samples/train_loss": 0.25},
        260: {"Train/Samples/lr": 0.25},
        350: {"Train/Samples/train_loss": 0.35},
    }


def test_interval_zero_logs_every_value_with_nan_and_inf(
    tmp_path: Path, comet_offline: Path
) -> None:
    """samples_log_interval 0 logs every step's values, NaN and Inf as the floats they are."""
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=0)) as monitor:
        monitor.log({"train/loss": math.nan, "train/lr": 1e-3}, step=1)
        monitor.log({"train/loss": math.inf}, step=2)
    logged = only_experiment(comet_offline).logged()
    assert sorted(logged) == [1, 2]
    assert same_number(logged[1]["train/loss"], math.nan) and logged[1]["train/lr"] == 1e-3
    assert logged[2] == {"train/loss": math.inf}


def test_a_failing_online_start_falls_back_to_offline_with_one_warning(
    tmp_path: Path, comet_offline: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """online unset and no API key (comet_ml.start raises): one warning naming the error, then
    an offline experiment that gets the metrics."""
    config = _config(tmp_path, samples_log_interval=1)
    del config["comet"]["online"]
    with trainmon.Monitor(config) as monitor:
        monitor.log({"train/loss": 1.0}, step=0)
    assert only_experiment(comet_offline).logged() == {0: {"train/loss": 1.0}}
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "comet_ml.start failed (ValueError: " in warning and "API key" in warning
    assert "logged offline" in warning and "comet upload" in warning


def test_an_explicit_online_start_that_fails_disables_only_comet(
    tmp_path: Path, comet_offline: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """online: true without an API key: the Comet writer is left out with one warning, no
    offline experiment is made, and the other writers run."""
    with trainmon.Monitor(_config(tmp_path, online=True)) as monitor:
        assert [w.kind for w in monitor.writers] == ["jsonl"]
        monitor.log({"train/loss": 1.0}, step=0)
    assert read_offline(comet_offline) == []
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "comet writer disabled" in warning and "API key" in warning
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    assert [r["values"] for r in journal if r["kind"] == "scalars"] == [{"train/loss": 1.0}]


def test_an_error_while_logging_stops_comet_only_with_one_warning(
    tmp_path: Path, comet_offline: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """The experiment's log_metrics raising is reported once; the writer stops calling Comet,
    the experiment is still archived at close, and the JSONL journal gets every step."""
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=1)) as monitor:
        (writer,) = [w for w in monitor.writers if w.kind == "comet"]

        def broken(*args: Any, **kwargs: Any) -> None:
            raise ConnectionError("comet is down")

        writer.experiment.log_metrics = broken
        for step in range(3):
            monitor.log({"train/loss": float(step)}, step=step)
            assert monitor.flush(timeout=30)
    assert only_experiment(comet_offline).logged() == {}
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and "comet writer" in warnings[0]
    assert "not delivered" in warnings[1] and "comet writer" in warnings[1]  # counted at close
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    steps = [r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]]
    assert steps == [0, 1, 2]


def test_per_rank_output_names_each_ranks_experiment(tmp_path: Path, comet_offline: Path) -> None:
    """With per-rank output, rank 2's experiment is named <experiment_name or job>-rank2."""
    config = _config(tmp_path)
    config["trainmon"] = {"per_rank_output": True}
    with trainmon.Monitor(config, place=ProcessPlace(2, 4)):
        pass
    assert only_experiment(comet_offline).name == "job-rank2"


def test_per_rank_output_with_one_experiment_key_is_a_config_error(
    tmp_path: Path, comet_offline: Path
) -> None:
    """A fixed experiment_key cannot hold several ranks' experiments: ConfigError naming it."""
    config = _config(tmp_path, experiment_key="a" * 40)
    config["trainmon"] = {"per_rank_output": True}
    with pytest.raises(ConfigError, match="'comet.experiment_key'"):
        trainmon.Monitor(config, place=ProcessPlace(0, 2))


def test_close_archives_the_experiment_once(comet_offline: Path) -> None:
    """close() ends the experiment once however often it is called: one archive with the
    values written before it."""
    from trainmon.writers.comet import CometWriter

    writer = CometWriter(CometConfig(enabled=True, online=False, samples_log_interval=0))
    writer.write([StepScalars(5, 0.0, {"a": 1.0, "b": 2})])
    writer.flush()
    writer.close()
    writer.close()
    assert only_experiment(comet_offline).logged() == {5: {"a": 1.0, "b": 2.0}}


def test_a_negative_interval_is_a_config_error(comet_offline: Path) -> None:
    """samples_log_interval below 0 is refused, naming the key, before Comet is started."""
    from trainmon.writers.comet import CometWriter

    with pytest.raises(ConfigError, match="'comet.samples_log_interval'"):
        CometWriter(CometConfig(enabled=True, samples_log_interval=-1))
    assert read_offline(comet_offline) == []


def test_missing_comet_ml_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enabling Comet without comet_ml raises MissingExtraError with the pip command."""
    real = trainmon.extras.is_installed
    monkeypatch.setattr(trainmon.extras, "is_installed", lambda m: m != "comet_ml" and real(m))
    with pytest.raises(MissingExtraError, match=r'pip install "trainmon\[comet\]"'):
        trainmon.Monitor(_config(tmp_path))
