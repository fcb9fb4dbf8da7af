"""One run identity: with TensorBoard (job ``tbjob``) and JSONL (job ``jjob``) both on, alerts,
W&B, MLflow and the Pushgateway grouping key all name the run the same way (they used to
disagree: alerts said ``jjob``, the others ``tbjob``, so the Pushgateway got two groups)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.config import load_config
from trainmon.core.place import ProcessPlace
from trainmon.writers import run_identity
from writers.test_wandb import _isolate, _teardown_wandb, read_run


@pytest.fixture
def gateway() -> Iterator[tuple[str, list[str]]]:
    """A stand-in Pushgateway on 127.0.0.1 that records the path of every push."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _take(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            paths.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_PUT = do_POST = _take

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()
    server.server_close()


def test_run_identity_is_the_first_enabled_file_writer(tmp_path: Path) -> None:
    place = ProcessPlace(rank=0, world_size=1)
    config = load_config(
        {
            "tensorboard": {"enabled": True, "output_path": str(tmp_path), "job_name": "tbjob"},
            "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "jjob"},
        }
    )
    identity = run_identity(config, place)
    assert (identity.name, identity.run_dir) == ("jjob", tmp_path / "jjob")
    none = run_identity(load_config({}), place)
    assert none.run_dir is None and none.name == "DeepSpeedJobName"


@pytest.mark.skipif(
    not all(trainmon.extras.is_installed(p) for p in ("wandb", "mlflow", "sqlalchemy")),
    reason="needs wandb and mlflow",
)
def test_alerts_wandb_mlflow_and_pushgateway_report_one_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gateway: tuple[str, list[str]]
) -> None:
    from mlflow import MlflowClient

    _teardown_wandb()
    _isolate(monkeypatch, tmp_path / "home")
    url, pushes = gateway
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = {
        "trainmon": {"per_rank_output": True},  # W&B names its runs after the job only so
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(tmp_path), "job_name": "tbjob"},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "jjob"},
        "wandb": {"enabled": True, "project": "p", "dir": str(tmp_path / "wb")},
        "mlflow": {"enabled": True, "tracking_uri": store},
        "prometheus": {"enabled": True, "serve": False, "pushgateway_url": url},
        "alerts": {
            "rules": [{"name": "big", "metric": "train/loss", "op": ">", "threshold": 1.0}],
            "sinks": [{"type": "file"}],
        },
    }
    try:
        with trainmon.Monitor(config) as monitor:
            (mlflow_writer,) = [w for w in monitor.writers if w.kind == "mlflow"]
            for step in range(1, 4):
                monitor.log({"train/loss": 5.0}, step=step)
        run_id = mlflow_writer.run_id
    finally:
        _teardown_wandb()

    alerts = [
        json.loads(line)
        for line in (tmp_path / "jjob" / "rank-0" / "alerts.jsonl").read_text().splitlines()
    ]
    assert alerts and {a["job"] for a in alerts} == {"jjob"}
    (run_dir,) = [p for p in (tmp_path / "wb" / "wandb").glob("offline-run-*") if p.is_dir()]
    run = read_run(run_dir).of_type("run")[0]
    assert (run["run_group"], run["display_name"]) == ("jjob", "jjob-rank0")
    assert MlflowClient(tracking_uri=store).get_run(run_id).info.run_name == "jjob-rank0"
    assert pushes and {p for p in pushes} == {"/metrics/job/jjob/rank/0"}, pushes
