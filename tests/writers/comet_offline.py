"""Read back what the real ``comet_ml`` SDK stored offline: the zip archive it writes at ``end()``.

An offline experiment is one ``<id>.zip`` in the offline folder holding ``experiment.json``
(project, workspace, key) and ``messages.json`` (one JSON message a line: metrics, "others" such
as the experiment's name). These helpers are what ``comet upload`` would send, decoded.
"""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Environment for fast, quiet offline experiments: no system metrics, no environment scan.
QUIET_ENV = {
    "COMET_DISABLE_AUTO_LOGGING": "1",
    "COMET_AUTO_LOG_ENV_DETAILS": "0",
    "COMET_AUTO_LOG_ENV_GPU": "0",
    "COMET_AUTO_LOG_ENV_CPU": "0",
    "COMET_AUTO_LOG_ENV_HOST": "0",
    "COMET_AUTO_LOG_CODE": "0",
    "COMET_AUTO_LOG_GIT_METADATA": "0",
    "COMET_AUTO_LOG_GIT_PATCH": "0",
    "COMET_AUTO_LOG_OUTPUT_LOGGER": "",
    "COMET_AUTO_LOG_CLI_ARGUMENTS": "0",
}
#: Metrics Comet logs by itself, not by the writer.
_OWN_METRICS = ("sys.", "process duration")


@dataclass
class OfflineExperiment:
    """One experiment as stored in its archive."""

    path: Path
    experiment: dict[str, Any]
    others: dict[str, Any] = field(default_factory=dict)
    metrics: list[tuple[int | None, str, float]] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        """The experiment's name (``set_name``), if one was set."""
        value = self.others.get("Name")
        return None if value is None else str(value)

    def logged(self) -> dict[int | None, dict[str, float]]:
        """``{step: {name: value}}`` of what the writer logged (Comet's own metrics left out)."""
        history: dict[int | None, dict[str, float]] = {}
        for step, name, value in self.metrics:
            history.setdefault(step, {})[name] = value
        return history


def _number(value: Any) -> float:
    if isinstance(value, str):  # NaN and infinities travel as strings in messages.json
        return float(value)
    return float(value)


def read_offline(folder: Path) -> list[OfflineExperiment]:
    """Every experiment archived in ``folder``, oldest first."""
    found = []
    for path in sorted(folder.glob("*.zip"), key=lambda p: p.stat().st_mtime):
        with zipfile.ZipFile(path) as archive:
            experiment = json.loads(archive.read("experiment.json"))
            stored = OfflineExperiment(path, experiment)
            for line in archive.read("messages.json").decode().splitlines():
                if not line.strip():
                    continue
                message = json.loads(line)
                payload = message.get("payload", {})
                if message.get("type") == "log_other":
                    stored.others[payload["key"]] = payload["value"]
                elif message.get("type") == "metric_msg":
                    metric = payload["metric"]
                    name = metric["metricName"]
                    if name.startswith(_OWN_METRICS):
                        continue
                    stored.metrics.append((metric["step"], name, _number(metric["metricValue"])))
        found.append(stored)
    return found


def only_experiment(folder: Path) -> OfflineExperiment:
    """The one experiment in ``folder`` (fails the test when there is not exactly one)."""
    experiments = read_offline(folder)
    assert len(experiments) == 1, f"expected one offline experiment in {folder}: {experiments}"
    return experiments[0]


def same_number(got: float, want: float) -> bool:
    """Equal, or both NaN."""
    return got == want or (math.isnan(got) and math.isnan(want))


@pytest.fixture
def comet_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real ``comet_ml``, offline into a fresh folder, with no API key in sight."""
    pytest.importorskip("comet_ml")
    folder = tmp_path / "comet-offline"
    folder.mkdir()
    for key in ("COMET_API_KEY", "COMET_WORKSPACE", "COMET_PROJECT_NAME", "COMET_ONLINE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in QUIET_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("COMET_OFFLINE_DIRECTORY", str(folder))
    monkeypatch.setenv("COMET_CONFIG", str(tmp_path / "no-comet-config"))
    return folder
