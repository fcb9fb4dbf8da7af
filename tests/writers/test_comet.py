"""The Comet writer against a fake ``comet_ml`` that records every call.

The real SDK is not used: an online experiment needs Comet's servers and an API key, and even
an offline one reaches for the network in places (``mode: "get"``, credential checks), so the
tests pin down what trainmon asks of ``comet_ml`` — DeepSpeed's start arguments and
``samples_log_interval`` rule — through a module injected into ``sys.modules``.
"""

from __future__ import annotations

import importlib.machinery
import logging
import math
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.config import CometConfig
from trainmon.distributed import ProcessPlace
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.events import StepScalars
from trainmon.journal import read_journal


@dataclass
class FakeExperiment:
    """Records what a ``comet_ml`` experiment is asked to do."""

    start_kwargs: dict[str, Any]
    names: list[str] = field(default_factory=list)
    logged: list[tuple[int | None, dict[str, Any]]] = field(default_factory=list)
    ended: int = 0
    fail_logging: bool = False
    url: str = "https://www.comet.com/ws/proj/0123456789abcdef0123456789abcdef"

    def set_name(self, name: str) -> None:
        self.names.append(name)

    def log_metrics(
        self, dic: dict[str, Any], prefix: str | None = None, step: int | None = None
    ) -> None:
        if self.fail_logging:
            raise ConnectionError("comet is down")
        self.logged.append((step, dict(dic)))

    def end(self) -> None:
        self.ended += 1


@dataclass
class FakeComet:
    """The injected module's state: every experiment started, and how start should behave."""

    module: types.ModuleType
    experiments: list[FakeExperiment] = field(default_factory=list)
    fail_online: Exception | None = None

    @property
    def experiment(self) -> FakeExperiment:
        (only,) = self.experiments
        return only


def _fake_module(new_sdk: bool = True) -> FakeComet:
    module = types.ModuleType("comet_ml")
    module.__spec__ = importlib.machinery.ModuleSpec("comet_ml", None)
    state = FakeComet(module)

    def record(kwargs: dict[str, Any]) -> FakeExperiment:
        if state.fail_online is not None and kwargs.get("online") is not False:
            raise state.fail_online
        experiment = FakeExperiment(kwargs)
        state.experiments.append(experiment)
        return experiment

    if new_sdk:

        def start(
            api_key: str | None = None,
            workspace: str | None = None,
            project: str | None = None,
            project_name: str | None = None,
            experiment_key: str | None = None,
            mode: str | None = None,
            online: bool | None = None,
            experiment_config: Any = None,
        ) -> FakeExperiment:
            return record(
                {
                    "api_key": api_key,
                    "workspace": workspace,
                    "project": project,
                    "project_name": project_name,
                    "experiment_key": experiment_key,
                    "mode": mode,
                    "online": online,
                }
            )

    else:

        def start(  # type: ignore[misc]  # comet_ml before project_name existed
            api_key: str | None = None,
            workspace: str | None = None,
            project: str | None = None,
            experiment_key: str | None = None,
            mode: str | None = None,
            online: bool | None = None,
        ) -> FakeExperiment:
            return record(
                {
                    "api_key": api_key,
                    "workspace": workspace,
                    "project": project,
                    "experiment_key": experiment_key,
                    "mode": mode,
                    "online": online,
                }
            )

    module.start = start  # type: ignore[attr-defined]
    return state


@pytest.fixture
def comet(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeComet]:
    """A fake ``comet_ml`` in ``sys.modules`` for the duration of one test."""
    state = _fake_module()
    monkeypatch.setitem(sys.modules, "comet_ml", state.module)
    yield state


def _config(base: Path, **comet: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "comet": {"enabled": True, **comet},
    }


DEEPSPEED_KEYS = {
    "api_key": "k" * 32,
    "project": "proj",
    "workspace": "ws",
    "experiment_name": "my-experiment",
    "experiment_key": "a" * 40,
    "online": True,
    "mode": "get_or_create",
}


def test_deepspeed_keys_reach_comet_ml_start_and_set_name(tmp_path: Path, comet: FakeComet) -> None:
    """api_key, workspace, project, experiment_key, mode and online go to comet_ml.start (the
    project as project_name where the SDK takes it); experiment_name to set_name."""
    with trainmon.Monitor(_config(tmp_path, **DEEPSPEED_KEYS)) as monitor:
        (writer,) = [w for w in monitor.writers if w.kind == "comet"]
        assert writer.location == comet.experiment.url
    assert comet.experiment.start_kwargs == {
        "api_key": "k" * 32,
        "workspace": "ws",
        "project": None,
        "project_name": "proj",
        "experiment_key": "a" * 40,
        "mode": "get_or_create",
        "online": True,
    }
    assert comet.experiment.names == ["my-experiment"]
    assert comet.experiment.ended == 1


def test_an_older_sdk_gets_the_project_as_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comet_ml.start without project_name gets the project under ``project``, as DeepSpeed
    passes it; unset keys go as None, leaving Comet's own configuration in charge."""
    state = _fake_module(new_sdk=False)
    monkeypatch.setitem(sys.modules, "comet_ml", state.module)
    with trainmon.Monitor(_config(tmp_path, project="proj")):
        pass
    assert state.experiment.start_kwargs == {
        "api_key": None,
        "workspace": None,
        "project": "proj",
        "experiment_key": None,
        "mode": None,
        "online": None,
    }
    assert state.experiment.names == []


def test_samples_log_interval_follows_deepspeed_per_metric(
    tmp_path: Path, comet: FakeComet
) -> None:
    """A metric is logged when first seen and then once its step has moved on by at least
    samples_log_interval since it was last logged, each metric on its own schedule; the
    metrics due at one step go in one log_metrics call at that step."""
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
    assert comet.experiment.logged == [
        (0, {"Train/Samples/train_loss": 0.0}),
        (100, {"Train/Samples/train_loss": 0.1}),
        (150, {"Train/Samples/lr": 0.5}),
        (250, {"Train/Samples/train_loss": 0.25}),
        (260, {"Train/Samples/lr": 0.25}),
        (350, {"Train/Samples/train_loss": 0.35}),
    ]


def test_interval_zero_logs_every_value_with_nan_and_inf(tmp_path: Path, comet: FakeComet) -> None:
    """samples_log_interval 0 logs every step's values, NaN and Inf as the floats they are."""
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=0)) as monitor:
        monitor.log({"train/loss": math.nan, "train/lr": 1e-3}, step=1)
        monitor.log({"train/loss": math.inf}, step=2)
    (step1, values1), (step2, values2) = comet.experiment.logged
    assert (step1, step2) == (1, 2)
    assert math.isnan(values1["train/loss"]) and values1["train/lr"] == 1e-3
    assert values2 == {"train/loss": math.inf}


def test_a_failing_online_start_falls_back_to_offline_with_one_warning(
    tmp_path: Path, comet: FakeComet, trainmon_logs: list[logging.LogRecord]
) -> None:
    """online unset and comet_ml.start raising: one warning naming the error, then an offline
    experiment that gets the metrics."""
    comet.fail_online = ValueError("Comet.ml requires an API key")
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=1)) as monitor:
        monitor.log({"train/loss": 1.0}, step=0)
    assert comet.experiment.start_kwargs["online"] is False
    assert comet.experiment.logged == [(0, {"train/loss": 1.0})]
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "comet_ml.start failed (ValueError: Comet.ml requires an API key)" in warning
    assert "logged offline" in warning and "comet upload" in warning


def test_an_explicit_online_start_that_fails_disables_only_comet(
    tmp_path: Path, comet: FakeComet, trainmon_logs: list[logging.LogRecord]
) -> None:
    """online: true and comet_ml.start raising: the Comet writer is left out with one warning,
    no offline experiment is made, and the other writers run."""
    comet.fail_online = ConnectionError("no route to host")
    with trainmon.Monitor(_config(tmp_path, online=True)) as monitor:
        assert [w.kind for w in monitor.writers] == ["jsonl"]
        monitor.log({"train/loss": 1.0}, step=0)
    assert comet.experiments == []
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "comet writer disabled" in warning and "no route to host" in warning


def test_an_error_while_logging_stops_comet_only_with_one_warning(
    tmp_path: Path, comet: FakeComet, trainmon_logs: list[logging.LogRecord]
) -> None:
    """log_metrics raising is reported once; the writer stops calling Comet, the experiment is
    still ended at close, and the JSONL journal gets every step."""
    with trainmon.Monitor(_config(tmp_path, samples_log_interval=1)) as monitor:
        comet.experiment.fail_logging = True
        for step in range(3):
            monitor.log({"train/loss": float(step)}, step=step)
            assert monitor.flush(timeout=30)
    assert comet.experiment.logged == [] and comet.experiment.ended == 1
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "comet writer" in warnings[0]
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    steps = [r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]]
    assert steps == [0, 1, 2]


def test_per_rank_output_names_each_ranks_experiment(tmp_path: Path, comet: FakeComet) -> None:
    """With per-rank output, rank 2's experiment is named <experiment_name or job>-rank2."""
    config = _config(tmp_path)
    config["trainmon"] = {"per_rank_output": True}
    with trainmon.Monitor(config, place=ProcessPlace(2, 4)):
        pass
    assert comet.experiment.names == ["job-rank2"]


def test_per_rank_output_with_one_experiment_key_is_a_config_error(
    tmp_path: Path, comet: FakeComet
) -> None:
    """A fixed experiment_key cannot hold several ranks' experiments: ConfigError naming it."""
    config = _config(tmp_path, experiment_key="a" * 40)
    config["trainmon"] = {"per_rank_output": True}
    with pytest.raises(ConfigError, match="'comet.experiment_key'"):
        trainmon.Monitor(config, place=ProcessPlace(0, 2))


def test_close_ends_the_experiment_once(comet: FakeComet) -> None:
    """close() calls end() once however often it is called; flush() never calls Comet."""
    from trainmon.writers.comet import CometWriter

    writer = CometWriter(CometConfig(enabled=True, samples_log_interval=0))
    writer.write([StepScalars(5, 0.0, {"a": 1.0, "b": 2})])
    writer.flush()
    writer.close()
    writer.close()
    assert comet.experiment.logged == [(5, {"a": 1.0, "b": 2})]
    assert comet.experiment.ended == 1


def test_a_negative_interval_is_a_config_error(comet: FakeComet) -> None:
    """samples_log_interval below 0 is refused, naming the key."""
    from trainmon.writers.comet import CometWriter

    with pytest.raises(ConfigError, match="'comet.samples_log_interval'"):
        CometWriter(CometConfig(enabled=True, samples_log_interval=-1))


def test_missing_comet_ml_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enabling Comet without comet_ml raises MissingExtraError with the pip command."""
    real = trainmon.extras.is_installed
    monkeypatch.setattr(trainmon.extras, "is_installed", lambda m: m != "comet_ml" and real(m))
    with pytest.raises(MissingExtraError, match=r'pip install "trainmon\[comet\]"'):
        trainmon.Monitor(_config(tmp_path))
