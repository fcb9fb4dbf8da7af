"""The MLflow writer against a real MLflow tracking store (SQLite in a temporary folder), read
back with MLflow's own client. Skipped without ``pip install "trainmon[mlflow]"``.

One store serves the whole module (creating its tables takes a few seconds); each test logs
into an experiment of its own.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import logging
import math
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.config import load_config
from trainmon.core.place import ProcessPlace
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.journal import read_journal

needs_mlflow = pytest.mark.skipif(
    not (trainmon.extras.is_installed("mlflow") and trainmon.extras.is_installed("sqlalchemy")),
    reason='needs pip install "trainmon[mlflow]"',
)
#: What MLflow's SQL stores keep for +/-Inf (they have no infinite floats).
SQL_INF = sys.float_info.max


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SQLite tracking URI shared by the module (its tables are created once, here)."""
    if not (trainmon.extras.is_installed("mlflow") and trainmon.extras.is_installed("sqlalchemy")):
        pytest.skip('needs pip install "trainmon[mlflow]"')
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    yield uri


def _config(base: Path, store: str, **mlflow: Any) -> dict[str, Any]:
    return {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "mlflow": {"enabled": True, "tracking_uri": store, **mlflow},
    }


def _writer(monitor: trainmon.Monitor) -> Any:
    (writer,) = [w for w in monitor.writers if w.kind == "mlflow"]
    return writer


def _history(store: str, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp in ms) of ``key``, as MLflow's client returns them."""
    from mlflow import MlflowClient

    history = MlflowClient(tracking_uri=store).get_metric_history(run_id, key)
    return sorted((m.step, m.value, m.timestamp) for m in history)


def _run(store: str, run_id: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=store).get_run(run_id)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@needs_mlflow
def test_every_value_reads_back_at_its_step_and_wall_time(tmp_path: Path, store: str) -> None:
    """get_metric_history returns each logged value at its step, stamped with the record's wall
    time in ms; NaN stays NaN and +/-Inf is what MLflow's SQL store keeps for them."""
    logged = [
        (0, {"train/loss": 2.5, "train/lr": 1e-3}),
        (1, {"train/loss": 0.1 + 0.2, "train/lr": 1e-3}),
        (2, {"train/loss": math.nan, "train/lr": 5e-4}),
        (3, {"train/loss": math.inf, "train/lr": -math.inf}),
        (7, {"train/loss": 1 / 3, "train/lr": 2}),
    ]
    with trainmon.Monitor(_config(tmp_path, store, experiment="values")) as monitor:
        run_id = _writer(monitor).run_id
        for step, values in logged:
            monitor.log(values, step=step)
    journal = [
        r for r in read_journal(tmp_path / "job" / "metrics.jsonl") if r["kind"] == "scalars"
    ]
    times = {r["step"]: int(r["time"] * 1000) for r in journal}
    for key in ("train/loss", "train/lr"):
        got = _history(store, run_id, key)
        want = [(step, float(values[key]), times[step]) for step, values in logged]
        want = [
            (s, SQL_INF if v == math.inf else -SQL_INF if v == -math.inf else v, t)
            for s, v, t in want
        ]
        assert [(s, t) for s, _, t in got] == [(s, t) for s, _, t in want], key
        assert all(_same(g[1], w[1]) for g, w in zip(got, want, strict=True)), (got, want)


@needs_mlflow
def test_run_is_named_tagged_given_params_and_finished_at_close(tmp_path: Path, store: str) -> None:
    """The run carries run_name, tags and params (as text) in the named experiment, and close
    ends it FINISHED with an end time; a second close changes nothing."""
    config = _config(
        tmp_path,
        store,
        experiment="named",
        run_name="my-run",
        tags={"team": "vision", "attempt": 2},
        params={"lr": 0.001, "layers": [64, 64], "optimizer": {"name": "adam"}},
    )
    monitor = trainmon.Monitor(config)
    writer = _writer(monitor)
    assert _run(store, writer.run_id).info.status == "RUNNING"
    monitor.log({"train/loss": 1.0}, step=0)
    monitor.close()
    writer.close()
    run = _run(store, writer.run_id)
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    assert run.info.run_name == "my-run"
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=store).get_experiment(run.info.experiment_id).name == "named"
    assert {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")} == {
        "team": "vision",
        "attempt": "2",
    }
    assert run.data.params == {
        "lr": "0.001",
        "layers": "[64, 64]",
        "optimizer": '{"name": "adam"}',
    }


@needs_mlflow
def test_without_run_name_the_run_is_named_after_the_job(tmp_path: Path, store: str) -> None:
    """No run_name: the run takes the job_name of the enabled output section."""
    with trainmon.Monitor(_config(tmp_path, store, experiment="job-named")) as monitor:
        run_id = _writer(monitor).run_id
    assert _run(store, run_id).info.run_name == "job"


@needs_mlflow
def test_a_flush_sends_at_most_1000_metrics_per_request(tmp_path: Path, store: str) -> None:
    """2,500 values logged between flushes go out in log_batch requests of at most 1,000
    metrics, and every one of them reads back."""
    monitor = trainmon.Monitor(_config(tmp_path, store, experiment="batches"))
    writer = _writer(monitor)
    sizes: list[int] = []
    real = writer._client.log_batch

    def spy(run_id: str, **kwargs: Any) -> Any:
        sizes.append(len(kwargs.get("metrics", ())))
        return real(run_id, **kwargs)

    writer._client.log_batch = spy
    for step in range(500):
        monitor.log({f"m/{i}": float(step * 10 + i) for i in range(5)}, step=step)
    monitor.close()
    assert sum(sizes) == 2500 and max(sizes) <= 1000
    assert _history(store, writer.run_id, "m/3")[-1][:2] == (499, 4993.0)
    assert len(_history(store, writer.run_id, "m/0")) == 500


@needs_mlflow
def test_names_mlflow_refuses_are_rewritten(tmp_path: Path, store: str) -> None:
    """Characters MLflow refuses become _, and a leading / is dropped into _; the values stay."""
    from trainmon.writers.mlflow import mlflow_key

    with trainmon.Monitor(_config(tmp_path, store, experiment="names")) as monitor:
        run_id = _writer(monitor).run_id
        monitor.log({"a@b": 1.0, "/abs/x": 2.0, "ok/name-1.2 x:y": 3.0}, step=0)
    assert [v for _, v, _ in _history(store, run_id, "a_b")] == [1.0]
    assert [v for _, v, _ in _history(store, run_id, "_abs_x")] == [2.0]
    assert [v for _, v, _ in _history(store, run_id, "ok/name-1.2 x_y")] == [3.0]
    assert mlflow_key("train/loss") == "train/loss"
    assert mlflow_key("a/../b") == "a____b"
    assert len(mlflow_key("x" * 300)) == 250


@needs_mlflow
def test_run_id_resumes_an_existing_run(tmp_path: Path, store: str) -> None:
    """A second monitor given run_id logs into the same run, which ends FINISHED again."""
    with trainmon.Monitor(_config(tmp_path / "a", store, experiment="resume")) as monitor:
        run_id = _writer(monitor).run_id
        monitor.log({"train/loss": 1.0}, step=0)
    config = _config(tmp_path / "b", store, run_id=run_id, tags={"resumed": "yes"})
    with trainmon.Monitor(config) as monitor:
        assert _run(store, run_id).info.status == "RUNNING"
        monitor.log({"train/loss": 0.5}, step=1)
    run = _run(store, run_id)
    assert run.info.status == "FINISHED" and run.data.tags["resumed"] == "yes"
    assert [(s, v) for s, v, _ in _history(store, run_id, "train/loss")] == [(0, 1.0), (1, 0.5)]


@needs_mlflow
def test_per_rank_output_gives_each_rank_its_own_tagged_run(tmp_path: Path, store: str) -> None:
    """With per-rank output rank 3 logs to a run of its own, named <job>-rank3 and tagged."""
    config = _config(tmp_path, store, experiment="ranks")
    config["trainmon"] = {"per_rank_output": True}
    with trainmon.Monitor(config, place=ProcessPlace(3, 4)) as monitor:
        run_id = _writer(monitor).run_id
        monitor.log({"train/loss": 1.0}, step=0)
    run = _run(store, run_id)
    assert run.info.run_name == "job-rank3"
    assert run.data.tags["trainmon.rank"] == "3" and run.data.tags["trainmon.world_size"] == "4"


@needs_mlflow
def test_a_tracking_store_failing_mid_run_is_one_warning_and_training_goes_on(
    tmp_path: Path, store: str, trainmon_logs: list[logging.LogRecord]
) -> None:
    """When log_batch starts failing, one warning is logged, the lost metrics are counted, the
    other writers get every step, and later flushes try again."""
    monitor = trainmon.Monitor(_config(tmp_path, store, experiment="failing"))
    writer = _writer(monitor)
    real = writer._client.log_batch
    failing = True

    def flaky(run_id: str, **kwargs: Any) -> Any:
        if failing:
            raise ConnectionError("tracking server went away")
        return real(run_id, **kwargs)

    monitor.log({"train/loss": 1.0}, step=0)
    assert monitor.flush(timeout=30)
    writer._client.log_batch = flaky
    for step in (1, 2):
        monitor.log({"train/loss": float(step)}, step=step)
        assert monitor.flush(timeout=30)
    failing = False
    monitor.log({"train/loss": 3.0}, step=3)
    monitor.close()
    assert writer.dropped_metrics >= 2  # steps 1 and 2 (and the error counter trainmon adds)
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "mlflow writer" in warnings[0] and "in flush" in warnings[0]
    assert [s for s, _, _ in _history(store, writer.run_id, "train/loss")] == [0, 3]
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    assert [
        r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]
    ] == [
        0,
        1,
        2,
        3,
    ]
    assert _run(store, writer.run_id).info.status == "FINISHED"


@needs_mlflow
def test_an_unreachable_tracking_server_is_one_message_and_never_blocks_the_caller(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """Nothing answering at an http tracking URI: Monitor() returns at once, the writer's own
    thread tries a bounded number of times and gives up with one warning naming the address,
    its values are counted, and the monitor runs with the others."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    with trainmon.Monitor(_config(tmp_path, uri)) as monitor:
        assert time.monotonic() - started < 1.0
        monitor.log({"train/loss": 1.0}, step=0)
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "MLflow tracking server at http://127.0.0.1:" in warnings[0]
    assert "does not answer" in warnings[0] and "given up" in warnings[0]
    assert sum(1 for w in warnings if "given up" in w) == 1
    assert monitor.undelivered[f"mlflow writer (MLflow at {uri})"] >= 1


@needs_mlflow
def test_a_tracking_uri_with_credentials_is_probed_without_them_and_never_printed(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """``http://user:password@host`` (and a token in the query) is a valid tracking URI: the
    start-up probe connects to the host itself, and the warning shows the address with the
    user info and the token masked."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://alice:pw-s3cret@127.0.0.1:{port}/prefix?token=tok-12345"
    with trainmon.Monitor(_config(tmp_path, uri)):
        pass
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    warning = warnings[0]
    assert f"MLflow at http://***@127.0.0.1:{port}/prefix?token=***" in warning
    assert "does not answer" in warning
    # the probe reached the port itself: a host of "alice:pw-s3cret@127.0.0.1" would not resolve
    assert "Connection refused" in warning or "refused" in warning.lower(), warning
    assert not any("s3cret" in w or "tok-12345" in w for w in warnings)


class _Answers500(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers 500 to everything, echoing the request's headers."""

    def _answer(self) -> None:
        body = f"internal error; you sent {dict(self.headers)!r} to {self.path}".encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@needs_mlflow
@pytest.mark.slow
def test_a_server_answering_500_never_blocks_and_its_echo_is_redacted(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real local server answering 500: Monitor() returns in well under a second, the writer
    is given up with one warning on its own thread, and no credential it echoes is printed."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw-s3cret")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}/?token=tok-12345"
        started = time.monotonic()
        monitor = trainmon.Monitor(_config(tmp_path, uri))
        assert time.monotonic() - started < 1.0
        for step in range(5):
            monitor.log({"train/loss": float(step)}, step=step)
        closing = time.monotonic()
        monitor.close()
        assert time.monotonic() - closing < monitor.config.trainmon.close_timeout_s + 1
    finally:
        server.shutdown()
        server.server_close()
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert sum(1 for w in warnings if "given up" in w) == 1, warnings
    token = base64.b64encode(b"alice:pw-s3cret").decode()
    for secret in ("pw-s3cret", "tok-12345", token):
        assert not any(secret in w for w in warnings), warnings
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    steps = [r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]]
    assert steps == [0, 1, 2, 3, 4]


@needs_mlflow
@pytest.mark.slow
def test_a_server_that_never_answers_never_blocks_the_caller(tmp_path: Path) -> None:
    """A server that accepts connections and never answers: Monitor() returns at once and
    close() within its budget, the journal keeps every value."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        monitor = trainmon.Monitor(_config(tmp_path, uri))
        assert time.monotonic() - started < 1.0
        monitor.log({"train/loss": 1.0}, step=0)
        closing = time.monotonic()
        monitor.close()
        assert time.monotonic() - closing < monitor.config.trainmon.close_timeout_s + 1
    assert monitor.undelivered.get(f"mlflow writer (MLflow at {uri})", 0) >= 1
    journal = read_journal(tmp_path / "job" / "metrics.jsonl")
    assert [r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]]


def test_missing_mlflow_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enabling MLflow without the package raises MissingExtraError with the pip command."""
    real = trainmon.extras.is_installed
    monkeypatch.setattr(trainmon.extras, "is_installed", lambda m: m != "mlflow" and real(m))
    with pytest.raises(MissingExtraError, match=r'pip install "trainmon\[mlflow\]"'):
        trainmon.Monitor(_config(tmp_path, "sqlite:///unused.db"))


@pytest.mark.parametrize("key", ["tracking_uri", "experiment", "run_name", "run_id"])
def test_an_empty_mlflow_string_is_a_config_error(key: str) -> None:
    """An empty tracking_uri / experiment / run_name / run_id is refused, naming the key."""
    with pytest.raises(ConfigError, match=f"'mlflow.{key}'"):
        load_config({"mlflow": {key: ""}})


@needs_mlflow
def test_a_resumed_monitor_logs_into_the_saved_mlflow_run(store: str, tmp_path: Path) -> None:
    """load_state_dict switches back to the saved run (RUNNING, then FINISHED at close) and
    deletes the empty run started for the resumed process; the resumed steps land in the
    saved run's history beside the first run's."""
    first = trainmon.Monitor(_config(tmp_path / "a", store))
    for step in range(1, 4):
        first.log({"train/loss": float(step)}, step=step)
    state = first.state_dict()
    saved_id = state["writers"]["mlflow"]["run_id"]
    first.close()

    second = trainmon.Monitor(_config(tmp_path / "b", store))
    fresh_id = _writer(second).run_id
    second.load_state_dict(state)
    second.log({"train/loss": 40.0}, step=4)
    second.flush()
    assert _writer(second).run_id == saved_id
    assert _run(store, saved_id).info.status == "RUNNING"
    second.close()
    assert _run(store, saved_id).info.status == "FINISHED"
    assert _run(store, fresh_id).info.lifecycle_stage == "deleted"
    history = [(s, v) for s, v, _ in _history(store, saved_id, "train/loss")]
    assert history == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_log_hparams_become_run_params_and_a_changed_value_keeps_the_first(
    tmp_path: Path, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    """log_hparams: flat keys become MLflow params (as text); logging a key again with another
    value keeps the first (MLflow params are immutable) with one warning; histograms and text
    are ignored by this writer."""
    monitor = trainmon.Monitor(_config(tmp_path, store, experiment="hparams"))
    writer = _writer(monitor)
    monitor.log_hparams({"lr": 0.001, "optimizer": {"name": "adam", "betas": [0.9, 0.99]}})
    monitor.log_histogram("weights", [1.0, 2.0, 3.0], step=0)
    monitor.log_text("note", "hello", step=0)
    monitor.log_hparams({"lr": 0.5, "warmup": 10}, metrics={"eval/loss": 0.25})
    with caplog.at_level(logging.WARNING, logger="trainmon"):
        monitor.close()
    params = _run(store, writer.run_id).data.params
    assert params == {
        "lr": "0.001",
        "optimizer.name": "adam",
        "optimizer.betas": "[0.9, 0.99]",
        "warmup": "10",
    }
    assert [m[:2] for m in _history(store, writer.run_id, "eval/loss")] == [(0, 0.25)]
    changed = [r for r in caplog.records if "cannot change" in r.getMessage()]
    assert len(changed) == 1 and "'lr'" in changed[0].getMessage()


@needs_mlflow
@pytest.mark.parametrize(
    ("error", "status"),
    [(None, "FINISHED"), (RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "KILLED")],
)
def test_how_the_with_block_ends_is_the_runs_mlflow_status(
    tmp_path: Path, store: str, error: BaseException | None, status: str
) -> None:
    """An exception leaving ``with Monitor(...)`` ends the MLflow run FAILED (KILLED for an
    interrupt) instead of FINISHED; the values logged before it are sent either way."""
    with contextlib.ExitStack() as stack:
        if error is not None:
            stack.enter_context(pytest.raises(type(error)))
        monitor = stack.enter_context(trainmon.Monitor(_config(tmp_path, store)))
        writer = _writer(monitor)
        monitor.log({"train/loss": 1.5}, step=3)
        if error is not None:
            raise error
    assert _run(store, writer.run_id).info.status == status
    assert [(s, v) for s, v, _ in _history(store, writer.run_id, "train/loss")] == [(3, 1.5)]


@needs_mlflow
def test_a_process_dying_of_an_uncaught_exception_ends_its_mlflow_run_failed(
    tmp_path: Path, store: str
) -> None:
    """Without a ``with`` block, the exit hook sees the uncaught exception and ends the run
    FAILED (a real interpreter, so that the exception really is uncaught)."""
    script = textwrap.dedent(
        """
        import json, sys, trainmon
        monitor = trainmon.Monitor(json.loads(sys.argv[1]))
        (writer,) = [w for w in monitor.writers if w.kind == "mlflow"]
        print(writer.run_id, flush=True)
        monitor.log({"train/loss": 2.0}, step=1)
        raise RuntimeError("the training loop crashed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(_config(tmp_path, store))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 1 and "the training loop crashed" in done.stderr
    run_id = done.stdout.split()[0]
    assert _run(store, run_id).info.status == "FAILED"
    assert [(s, v) for s, v, _ in _history(store, run_id, "train/loss")] == [(1, 2.0)]
