"""``trainmon sync``: a real journal (two attempts in one folder, the second redoing steps
21-30 with other values) replayed into TensorBoard, CSV, MLflow (a sqlite store) and W&B
(offline), each read back with the backend's own reader, and each synced twice."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.cli import main
from trainmon.cli.replay import load_replay
from trainmon.journal import read_journal

#: Steps 1-30 by the first attempt, 21-40 by the second (restarted into the same folder).
FIRST, SECOND = range(1, 31), range(21, 41)


def _loss(step: int) -> float:
    """The kept value of ``loss`` at ``step``: the second attempt's from step 21 on."""
    return 100.0 + step if step >= 21 else 1.0 / step


def _two_attempts(base: Path, *, checkpoint: bool) -> Path:
    """A job folder written by two Monitors (a JSONL journal, and the live TensorBoard files
    in ``base/tb``); with ``checkpoint`` the second resumes from the first's state at step
    20 (the journal gets a ``resume`` record), else it simply restarts into the folder."""
    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base / "runs"), "job_name": "job"},
        "tensorboard": {"enabled": True, "output_path": str(base / "tb"), "job_name": "job"},
    }
    state = None
    with trainmon.Monitor(config) as monitor:
        monitor.log_hparams({"lr": 0.1, "optimizer": {"name": "adam"}})
        for step in FIRST:
            monitor.step = step
            monitor.log({"loss": 1.0 / step, "first_only": float(step)})
            if step % 10 == 0:
                monitor.log_histogram("w", [1.0, 2.0, float(step)], step=step)
                monitor.log_text("note", f"first {step}", step=step)
            if step == 20:
                state = monitor.state_dict()
    with trainmon.Monitor(config) as monitor:
        if checkpoint:
            assert state is not None
            monitor.load_state_dict(state)
        for step in SECOND:
            monitor.log({"loss": 100.0 + step}, step=step)
            if step % 10 == 0:
                monitor.log_histogram("w", [5.0, 6.0, 7.0, float(step)], step=step)
                monitor.log_text("note", f"second {step}", step=step)
    return base / "runs" / "job"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Two attempts in one job folder, the second restarted (no checkpoint) at step 21."""
    return _two_attempts(tmp_path, checkpoint=False)


def _sync(run: Path, *to: str, capsys: pytest.CaptureFixture[str], **options: str) -> str:
    argv = ["sync", str(run), "--to", *to]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", value]
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("checkpoint", [False, True], ids=["restarted", "resumed"])
def test_replay_keeps_each_step_once_with_the_latest_attempts_values(
    tmp_path: Path, checkpoint: bool
) -> None:
    """Steps 21-30, logged by both attempts, keep the second attempt's values (and what only
    the first attempt logged there is dropped with them), whether the second attempt resumed
    from a checkpoint or simply restarted into the folder; the run id is stable."""
    run = _two_attempts(tmp_path, checkpoint=checkpoint)
    resumes = [r["step"] for r in read_journal(run / "metrics.jsonl") if r["kind"] == "resume"]
    assert resumes == ([21] if checkpoint else [])
    replay = load_replay(run)
    assert replay.attempts == 2 and replay.job == "job"
    assert [r.step for r in replay.steps] == list(range(1, 41))
    assert {r.step: r.values["loss"] for r in replay.steps} == {s: _loss(s) for s in range(1, 41)}
    assert [r.step for r in replay.steps if "first_only" in r.values] == list(range(1, 21))
    assert [(e.step, getattr(e, "text", None)) for e in replay.extras if e.name == "note"] == [
        (10, "first 10"),
        (20, "first 20"),
        (30, "second 30"),
        (40, "second 40"),
    ]
    assert replay.hparams is not None
    assert dict(replay.hparams.hparams) == {"lr": 0.1, "optimizer.name": "adam"}
    assert load_replay(run / "metrics.jsonl").run_id == replay.run_id


def _accumulator(folder: Path, *, plugin: bool = False) -> Any:
    """TensorBoard's reader of ``folder``: the legacy EventAccumulator, or (``plugin``) the
    one its app uses, which keeps everything as tensors."""
    from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator

    module = plugin_event_accumulator if plugin else event_accumulator
    acc = module.EventAccumulator(
        str(folder), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def test_tensorboard_sync_supersedes_the_live_files_and_a_second_sync_adds_nothing(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Synced over the live writer's folder (which holds steps 21-30 twice), TensorBoard's
    reader shows each step once with the kept value, the histograms and text of the kept
    steps and the hyper-parameters; a second sync leaves one sync file and the same data."""
    folder = tmp_path / "tb" / "job"
    live = sorted(p.name for p in folder.glob("*tfevents*"))
    assert len(live) == 2
    before = [(e.step, e.value) for e in _accumulator(folder).Scalars("loss")]
    assert len(before) > 40  # the live files alone: the redone steps twice
    seen = []
    for _ in range(2):
        out = _sync(run, "tensorboard", str(tmp_path / "tb"), capsys=capsys)
        assert "40 steps, 60 values, 4 histograms, 4 texts, 2 hyper-parameters" in out
        assert "steps/s" in out and "values/s" in out
        acc = _accumulator(folder)
        loss = [(e.step, e.value) for e in acc.Scalars("loss")]
        assert loss == [(s, pytest.approx(_loss(s), rel=1e-6)) for s in range(1, 41)]
        assert [e.step for e in acc.Scalars("first_only")] == list(range(1, 21))
        histograms = acc.Histograms("w")
        assert [(h.step, h.histogram_value.num) for h in histograms] == [
            (10, 3),
            (20, 3),
            (30, 4),
            (40, 4),
        ]
        # text and hparams as TensorBoard's app reads the folder (its own accumulator, which
        # keeps everything as tensors; the legacy one purges no tensors)
        shown = _accumulator(folder, plugin=True)
        assert [(e.step, e.tensor_proto.float_val[0]) for e in shown.Tensors("loss")] == loss
        texts = [(t.step, t.tensor_proto.string_val[0].decode()) for t in shown.Tensors("note")]
        assert texts == [(10, "first 10"), (20, "first 20"), (30, "second 30"), (40, "second 40")]
        assert len(shown.Tensors("_hparams_/session_start_info")) == 1
        files = sorted(p.name for p in folder.glob("*tfevents*"))
        seen.append(files)
    assert len(seen[1]) == len(live) + 2  # the live files stay (superseded), one sync set
    assert set(seen[0]) - set(live) != set(seen[1]) - set(live)  # rewritten, not added to


def _csv_rows(path: Path) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        assert header == ["step", path.stem]
        return [(int(step), float(value)) for step, value in reader]


def test_csv_sync_writes_deepspeeds_layout_and_a_second_sync_adds_nothing(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One CSV per metric in ``DIR/<job>``, each kept step once; syncing again rewrites the
    files to the same rows instead of appending."""
    for _ in range(2):
        _sync(run, "csv", str(tmp_path / "csv"), capsys=capsys)
        folder = tmp_path / "csv" / "job"
        assert _csv_rows(folder / "loss.csv") == [(s, _loss(s)) for s in range(1, 41)]
        assert [s for s, _ in _csv_rows(folder / "first_only.csv")] == list(range(1, 21))
    assert not list((tmp_path / "csv").glob(".*"))  # no staging folder left behind


needs_mlflow = pytest.mark.skipif(
    not (trainmon.extras.is_installed("mlflow") and trainmon.extras.is_installed("sqlalchemy")),
    reason='needs pip install "trainmon[mlflow]"',
)


@needs_mlflow
def test_mlflow_sync_finds_its_run_again_and_a_second_sync_adds_nothing(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first sync creates one run tagged with the journal's run id holding every kept
    step and the hyper-parameters as params; the second finds that run and sends nothing."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outputs = [_sync(run, "mlflow", uri, capsys=capsys, experiment="e") for _ in range(2)]
    assert "values were there already" not in outputs[0]
    assert "60 values were there already" in outputs[1]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("e")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "job" and found.info.status == "FINISHED"
    assert found.data.tags["trainmon.journal_run_id"] == load_replay(run).run_id
    assert found.data.params == {"lr": "0.1", "optimizer.name": "adam"}
    history = sorted(
        (m.step, m.value) for m in client.get_metric_history(found.info.run_id, "loss")
    )
    assert history == [(s, pytest.approx(_loss(s))) for s in range(1, 41)]
    assert len(client.get_metric_history(found.info.run_id, "first_only")) == 20


@needs_mlflow
def test_mlflow_sync_fills_in_the_steps_a_live_run_missed(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that got steps 1-10 live (its server then went down) gets, with ``--run-id``, the
    other 30 steps and no second copy of the first 10."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    live = client.create_run(client.create_experiment("live")).info.run_id
    client.log_batch(live, metrics=[Metric("loss", 1.0 / s, 0, s) for s in range(1, 11)])
    out = _sync(run, "mlflow", uri, capsys=capsys, run_id=live)
    assert "10 values were there already" in out
    history = sorted((m.step, m.value) for m in client.get_metric_history(live, "loss"))
    assert history == [(s, pytest.approx(_loss(s))) for s in range(1, 41)]


@needs_mlflow
def test_an_unknown_mlflow_run_id_is_named(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--run-id`` naming no run in the store ends with exit status 1 and that id."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sync", str(run), "--to", "mlflow", uri, "--run-id", "abc123"]) == 1
    assert f"--run-id abc123: no such MLflow run at {uri}" in capsys.readouterr().err


def test_bad_destinations_are_named(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown backend, a missing folder argument and a folder without a journal each end
    with exit status 1 and one message saying what was expected."""
    assert main(["sync", str(run), "--to", "neptune", "x"]) == 1
    assert (
        "--to neptune: expected one of tensorboard, mlflow, wandb, csv" in capsys.readouterr().err
    )
    assert main(["sync", str(run), "--to", "csv"]) == 1
    assert "--to csv: expected a DIR after it" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["sync", str(tmp_path / "empty"), "--to", "csv", str(tmp_path)]) == 1
    assert "no trainmon journal (metrics.jsonl) here" in capsys.readouterr().err


# ---- W&B, offline --------------------------------------------------------------------------


@pytest.fixture
def wandb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No credentials, no network: a fresh HOME, W&B's variables cleared, offline mode."""
    wandb = pytest.importorskip("wandb")
    for name in list(__import__("os").environ):
        if name.startswith("WANDB_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / ".config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / ".cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(home / ".data"))
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    (tmp_path / "wb").mkdir()
    wandb.teardown()
    yield tmp_path / "wb"
    wandb.teardown()


def _wandb_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``run-*.wandb`` in ``run_dir``, decoded by wandb-core's reader."""
    from wandb.util import get_core_path

    (wandb_file,) = run_dir.glob("run-*.wandb")
    done = subprocess.run(
        [
            get_core_path(),
            *("leet", "inspect", "--no-observability", "--json", "--run-file"),
            str(wandb_file),
            str(run_dir.parent),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line]


@pytest.mark.slow
def test_wandb_offline_sync_logs_the_kept_steps_under_the_journals_run_id(
    run: Path, wandb_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline, the W&B run carries the journal's run id, each kept step's values and the
    hyper-parameters in its config; a second sync writes to the same run id."""
    run_id = load_replay(run).run_id
    for _ in range(2):
        out = _sync(run, "wandb", "proj", capsys=capsys)
        assert f"W&B run {run_id}" in out and "wandb sync" in out
    folders = sorted((wandb_home / "wandb").glob(f"offline-run-*-{run_id}*"))
    assert len(folders) == 2  # offline: each sync is a folder of the same run id
    records = _wandb_records(folders[0])
    rows = {}
    for record in records:
        if record.get("type") == "history":
            item = record["history"]["item"]
            if "loss" in item:
                rows[int(record["history"]["step"]["num"])] = float(item["loss"])
    assert sorted(rows) == list(range(1, 41))
    assert all(math.isclose(rows[s], _loss(s)) for s in rows)
    (run_record,) = [r["run"] for r in records if r.get("type") == "run"]
    assert run_record["run_id"] == run_id
    assert "lr" in json.dumps(run_record.get("config", {})) or any(
        "lr" in json.dumps(r) for r in records if r.get("type") == "config"
    )


def test_sync_is_listed_in_the_cli_help() -> None:
    """``trainmon --help`` names the sync command (it is registered, not a separate script)."""
    done = subprocess.run(
        [sys.executable, "-m", "trainmon", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "sync" in done.stdout


def test_a_long_replay_at_a_terminal_shows_a_progress_bar(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a terminal, a replay of at least PROGRESS_MIN_STEPS steps draws tqdm's bar on stderr
    (here the threshold is lowered to the run's 40 steps); stdout keeps the two lines."""
    import trainmon.cli.sync as sync_module

    monkeypatch.setattr(sync_module, "PROGRESS_MIN_STEPS", 40)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["sync", str(run), "--to", "csv", str(tmp_path / "csv")]) == 0
    captured = capsys.readouterr()
    assert "/40 [" in captured.err and "step/s" in captured.err
    assert len(captured.out.splitlines()) == 2


def test_a_journal_cut_short_by_a_kill_syncs_its_whole_lines(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A last line cut short (the process was killed mid-write) is left out; every whole
    line before it is synced."""
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'{"v":1,"kind":"scalars","step":41,"time":1.0,"values":{"loss":')
    out = _sync(run, "csv", str(tmp_path / "csv"), capsys=capsys)
    assert "40 steps" in out
    assert _csv_rows(tmp_path / "csv" / "job" / "loss.csv") == [(s, _loss(s)) for s in range(1, 41)]


def test_an_interrupted_sync_leaves_the_earlier_sync_as_it_was(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C part-way through a TensorBoard sync (exit status 130) removes the partial set;
    the earlier sync's files and what TensorBoard shows of them are unchanged."""
    from trainmon.cli.replay import Replay

    _sync(run, "tensorboard", str(tmp_path / "tb"), capsys=capsys)
    folder = tmp_path / "tb" / "job"
    files = sorted(p.name for p in folder.iterdir())
    batches = Replay.batches

    def interrupted(self: Replay, size: int = 256) -> Iterator[Any]:
        for number, batch in enumerate(batches(self, size=5)):
            if number == 3:
                raise KeyboardInterrupt
            yield batch

    monkeypatch.setattr(Replay, "batches", interrupted)
    assert main(["sync", str(run), "--to", "tensorboard", str(tmp_path / "tb")]) == 130
    assert sorted(p.name for p in folder.iterdir()) == files
    loss = [(e.step, e.value) for e in _accumulator(folder).Scalars("loss")]
    assert loss == [(s, pytest.approx(_loss(s), rel=1e-6)) for s in range(1, 41)]
