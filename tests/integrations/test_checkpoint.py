"""Checkpoints and resume: the engine's DeepSpeed-style save/load, the monitor's state, and a
run killed with SIGKILL past a checkpoint whose resumed run every reader shows once per step."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.core.events import StepScalars
from trainmon.journal import read_journal
from trainmon.report.csvfiles import read_metric_csv
from trainmon.report.loading import load_run
from trainmon.writers.tensorboard import TensorBoardWriter

torch = pytest.importorskip("torch")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

WORKER = Path(__file__).parents[1] / "scripts" / "resume_worker.py"
SRC = Path(__file__).parents[2] / "src"


def _scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` as TensorBoard's own reader shows them."""
    acc = event_accumulator.EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _journal_values(folder: Path, name: str) -> list[tuple[int, Any]]:
    return [
        (r["step"], r["values"][name])
        for r in read_journal(folder)
        if r["kind"] == "scalars" and name in r["values"]
    ]


# ---- kill -9 past a checkpoint, then resume ------------------------------------------------


def _worker(out: Path, *args: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, str(WORKER), str(out), *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_run_killed_past_its_checkpoint_resumes_and_each_step_is_shown_once(
    tmp_path: Path,
) -> None:
    """Run 1 saves at step 5, logs to step 9 and is SIGKILLed; run 2 loads the checkpoint and
    trains to step 12. TensorBoard (EventAccumulator), read_journal, summary's loader and the
    CSV reader each show steps 1-12 once: 1-5 from run 1, 6-12 from run 2."""
    first = _worker(tmp_path, 1, 12, 5, 9)
    assert first.stdout is not None
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = first.stdout.readline()
        lines.append(line)
        if line.startswith("HANGING") or not line:
            break
    assert lines[-1].startswith("HANGING"), lines
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step5"
    # the killed run's steps 6-9 are on disk: the orphans the resume has to hide
    assert [s for s, _ in _scalars(tmp_path / "tb" / "job", "test/run")] == list(range(1, 10))

    second = _worker(tmp_path, 2, 12, 0, 0)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    assert "LOADED" in out and "global_step5/mp_rank_00_model_states.pt" in out
    assert "{'run': 1, 'step': 5}" in out  # client_state comes back

    expected = [(s, 1.0) for s in range(1, 6)] + [(s, 2.0) for s in range(6, 13)]
    assert _scalars(tmp_path / "tb" / "job", "test/run") == expected
    assert [s for s, _ in _scalars(tmp_path / "tb" / "job", "train/loss")] == list(range(1, 13))

    journal = tmp_path / "job"
    assert _journal_values(journal, "test/run") == [(s, int(v)) for s, v in expected]
    records = list(read_journal(journal))
    assert [r["step"] for r in records if r["kind"] == "resume"] == [6]
    windows = [(r["first_step"], r["last_step"]) for r in records if r["kind"] == "window"]
    assert windows == [(1, 4), (6, 8), (9, 12)]  # run 1's window 5-8 was orphaned
    run = load_run(journal)  # what summary and report read
    series = run.series["test/run"]
    assert list(zip(series.steps, series.values, strict=True)) == expected

    csv_file = tmp_path / "csv" / "job" / "test_run.csv"
    rows = csv_file.read_text().splitlines()
    assert rows[0] == "step,run" and len(rows) == 1 + 9 + 7  # appended, nothing rewritten
    name, steps, values, skipped = read_metric_csv(csv_file)
    assert (name, skipped) == ("test/run", 0)
    assert list(zip(steps, values, strict=True)) == expected
    tb_summary = load_run(tmp_path / "tb" / "job").series["test/run"]  # trainmon's TB reader
    assert list(zip(tb_summary.steps, tb_summary.values, strict=True)) == expected


# ---- the engine's save and load ------------------------------------------------------------


def _engine(base: Path, **extra: Any) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 100,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
        **extra,
    }
    engine, _, _, _ = trainmon.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    return engine


def _train(engine: Any, steps: int, value: float = 1.0) -> None:
    inputs = torch.full((2, 4), value)
    for _ in range(steps):
        loss = engine(inputs).pow(2).mean()
        engine.backward(loss)
        engine.step()


def test_save_and_load_restore_model_optimizer_scheduler_and_counters(tmp_path: Path) -> None:
    """A loaded engine has the saved weights, Adam moments, scheduler position and counters,
    the DeepSpeed file layout and return values, and its monitor logs from the next step."""
    engine = _engine(tmp_path / "a")
    _train(engine, 3)
    assert engine.save_checkpoint(str(tmp_path / "ckpt"), client_state={"epoch": 7}) is True
    saved = {k: v.clone() for k, v in engine.module.state_dict().items()}
    saved_lr = engine.get_lr()
    saved_moments = engine.optimizer.state_dict()["state"][0]["exp_avg"].clone()
    engine.close()
    folder = tmp_path / "ckpt" / "global_step3"
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step3"
    assert sorted(p.name for p in folder.iterdir()) == [
        "mp_rank_00_model_states.pt",
        "trainmon_state_rank0.json",
    ]

    other = _engine(tmp_path / "b")
    path, client = other.load_checkpoint(str(tmp_path / "ckpt"))
    assert path == str(folder / "mp_rank_00_model_states.pt")
    assert client == {"epoch": 7}
    for key, value in other.module.state_dict().items():
        assert torch.equal(value, saved[key])
    assert other.get_lr() == saved_lr
    assert torch.equal(other.optimizer.state_dict()["state"][0]["exp_avg"], saved_moments)
    assert (other.global_steps, other.global_samples, other.monitor.step) == (3, 6, 3)
    _train(other, 2)
    other.close()
    steps = [s for s, _ in _journal_values(tmp_path / "b" / "job", "train/loss")]
    assert steps == [4, 5]


def test_load_without_latest_returns_none_and_bad_inputs_are_named(
    tmp_path: Path, trainmon_logs: list[Any]
) -> None:
    """Like DeepSpeed: no ``latest`` file is (None, None) with a warning; a tag with a slash,
    a missing tag and a client_state key that is the checkpoint's own are refused by name."""
    engine = _engine(tmp_path)
    try:
        assert engine.load_checkpoint(str(tmp_path / "nothing")) == (None, None)
        assert any("no 'latest' file" in r.getMessage() for r in trainmon_logs)
        with pytest.raises(ValueError, match="'a/b'"):
            engine.save_checkpoint(str(tmp_path / "c"), tag="a/b")
        with pytest.raises(ValueError, match=r"\['module'\]"):
            engine.save_checkpoint(str(tmp_path / "c"), client_state={"module": 1})
        with pytest.raises(FileNotFoundError, match="'missing'"):
            engine.load_checkpoint(str(tmp_path / "c"), tag="missing")
    finally:
        engine.close()


def test_saving_after_a_stop_rule_fired_raises_and_saves_nothing(tmp_path: Path) -> None:
    """A NaN loss with a stop rule: save_checkpoint right after the step (no wait for the
    background rules) raises TrainingStopped, and no checkpoint file is written."""
    rules = [{"name": "loss-nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}]
    for attempt in range(5):  # the rule must not have run yet for this to test the drain
        engine = _engine(tmp_path / str(attempt), alerts={"rules": rules})
        try:
            _train(engine, 2)
            try:
                _train(engine, 1, value=math.nan)
            except trainmon.TrainingStopped:
                continue  # the rules were fast enough to stop the step itself: try again
            with pytest.raises(trainmon.TrainingStopped, match="loss-nan"):
                engine.save_checkpoint(str(tmp_path / "ckpt"))
            assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").rglob("*"))
            return
        finally:
            engine.close()
    pytest.skip("the background rules stopped every step before the save could be tried")


# ---- the monitor's state -------------------------------------------------------------------


class _Alerts:
    def __init__(self) -> None:
        self.alerts: list[Any] = []

    def on_alert(self, alert: Any) -> None:
        self.alerts.append(alert)


def _alert_config(base: Path) -> dict[str, Any]:
    rules = [
        {"name": "spike", "metric": "m", "kind": "spike", "factor": 3.0, "window": 20,
         "min_samples": 10},
        {"name": "high", "metric": "h", "op": ">", "threshold": 5.0, "resolve_after": 1},
    ]  # fmt: skip
    return {
        "steps_per_print": 4,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "alerts": {"rules": rules, "sinks": []},
    }


def test_alert_baselines_and_firing_alerts_survive_a_resume(tmp_path: Path) -> None:
    """After load_state_dict the spike rule's baseline is back (a spike at the first resumed
    step fires, where a fresh rule would still be learning) and a firing threshold alert is
    resolved, not fired again; the state is JSON and names its format and version."""
    first = trainmon.Monitor(_alert_config(tmp_path))
    for step in range(1, 13):
        first.log({"m": 1.0, "h": 9.0 if step == 12 else 1.0}, step=step)
    first.step = 12
    state = first.state_dict()
    first.close()
    assert (state["format"], state["version"], state["step"]) == ("trainmon.monitor_state", 1, 12)
    assert state["window"] == {"steps": 4, "seconds": None, "next_step": 13}
    assert state["alerts"]["rules"]["spike"]["condition"]["values"] == [1.0] * 12
    assert state["alerts"]["rules"]["high"]["alert"]["active"]["step"] == 12
    state = json.loads(json.dumps(state))

    second = trainmon.Monitor(_alert_config(tmp_path))
    seen = _Alerts()
    second.add_callback(seen)
    second.load_state_dict(state)
    assert second.step == 12
    second.log({"m": 10.0, "h": 1.0}, step=13)
    second.flush()
    second.close()
    assert [(a.rule, a.state, a.step) for a in seen.alerts] == [
        ("spike", "firing", 13),
        ("high", "resolved", 13),
    ]

    fresh = trainmon.Monitor(_alert_config(tmp_path / "fresh"))
    seen_fresh = _Alerts()
    fresh.add_callback(seen_fresh)
    fresh.log({"m": 10.0, "h": 1.0}, step=13)
    fresh.flush()
    fresh.close()
    assert seen_fresh.alerts == []  # what the restored state changes


def test_load_state_dict_names_what_is_wrong(tmp_path: Path) -> None:
    """A mapping that is not a monitor state, a newer version or a bad step is refused by key."""
    with trainmon.Monitor({"console": {"enabled": False}}) as monitor:
        with pytest.raises(ValueError, match="'format'"):
            monitor.load_state_dict({"step": 3})
        good = monitor.state_dict()
        with pytest.raises(ValueError, match="'version' = 99"):
            monitor.load_state_dict({**good, "version": 99})
        with pytest.raises(ValueError, match="'step' = -1"):
            monitor.load_state_dict({**good, "step": -1})


def test_tensorboard_marker_sorts_after_files_of_the_same_second(tmp_path: Path) -> None:
    """Two writers opened in the same second: the resumed one's purge marker still goes into a
    file TensorBoard reads last, so the first writer's steps >= 6 are hidden."""
    first = TensorBoardWriter(tmp_path)
    first.write([StepScalars(s, time.time(), {"x": float(s)}) for s in range(1, 11)])
    first.close()
    # another process of the same second, whose name sorts after ours (a larger pid)
    head, _, _ = first.path.name.rsplit(".", 2)
    first.path.rename(first.path.with_name(f"{head}.99999999.0"))
    second = TensorBoardWriter(tmp_path)
    assert second.path.name < f"{head}.99999999.0"  # a marker in this file would come first
    second.resume(6, None)
    second.write([StepScalars(s, time.time(), {"x": 100.0 + s}) for s in range(6, 9)])
    second.close()
    assert _scalars(tmp_path, "x") == [(s, float(s)) for s in range(1, 6)] + [
        (s, 100.0 + s) for s in range(6, 9)
    ]
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2  # the unused file is removed


def test_orphaned_steps_stay_hidden_when_the_resumed_run_stops_earlier(tmp_path: Path) -> None:
    """The killed run logged to step 9, the resumed one (from 5) only to 7: read_journal and
    the summary's loader show 1-5 and 6-7, never the orphaned 8 and 9; trainmon's TensorBoard
    reader honours the purge marker the same way."""
    config = {
        "steps_per_print": 100,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "tensorboard": {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "job"},
    }
    with trainmon.Monitor(config) as first:
        for step in range(1, 10):
            first.log({"x": 1.0}, step=step)
        first.step = 5
        state = first.state_dict()
    with trainmon.Monitor(config) as second:
        second.load_state_dict(state)
        for step in range(6, 8):
            second.log({"x": 2.0}, step=step)
    expected = [(s, 1.0) for s in range(1, 6)] + [(6, 2.0), (7, 2.0)]
    assert _journal_values(tmp_path / "job", "x") == expected
    for folder in (tmp_path / "job", tmp_path / "tb" / "job"):
        series = load_run(folder).series["x"]
        assert list(zip(series.steps, series.values, strict=True)) == expected
    assert _scalars(tmp_path / "tb" / "job", "x") == expected


# ---- several ranks ---------------------------------------------------------------------------


def _torchrun_results(tmp_path: Path, mode: str) -> list[dict[str, Any]]:
    """Run the worker on two ranks; a port taken by another process meanwhile (other suites
    run torchrun on this machine too) is retried with a new one. Every run must end cleanly:
    exit code 0, no "terminate called" abort, no gloo thread left after destroy_process_group."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={port}",
            str(WORKER.parent / "ckpt_ranks_worker.py"), str(tmp_path), mode,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
        if done.returncode == 0 or "address already in use" not in done.stderr.lower():
            break
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "terminate called" not in output, output
    # both ranks print to one pipe: their lines may be glued together, so split on the markers
    decode = json.JSONDecoder().raw_decode
    found = [decode(part)[0] for part in done.stdout.split("RESULT ")[1:]]
    # no gloo thread may survive destroy_process_group (its teardown at exit could abort)
    threads = [decode(part)[0] for part in done.stdout.split("THREADS ")[1:]]
    assert sorted(t["rank"] for t in threads) == [0, 1], output
    for row in threads:
        if row["after_destroy"] is not None:
            gloo = [name for name in row["after_destroy"] if "gloo" in name]
            assert gloo == [], f"rank {row['rank']}: gloo threads {gloo} after destroy"
    return sorted(found, key=lambda r: r["rank"])


@pytest.mark.slow
def test_two_ranks_save_and_load_together(tmp_path: Path) -> None:
    """Under torchrun both ranks get the saved weights and counters back; rank 0 wrote the
    model file and each rank its own trainmon state."""
    results = _torchrun_results(tmp_path, "save")
    assert [(r["rank"], r["equal"], r["steps"], r["client"]) for r in results] == [
        (0, True, [3, 3], {}),
        (1, True, [3, 3], {}),
    ]
    folder = tmp_path / "ckpt" / "global_step3"
    assert sorted(p.name for p in folder.iterdir()) == [
        "mp_rank_00_model_states.pt",
        "trainmon_state_rank0.json",
        "trainmon_state_rank1.json",
    ]


@pytest.mark.slow
def test_a_stop_seen_on_rank_0_stops_the_save_on_every_rank(tmp_path: Path) -> None:
    """Rules run on rank 0 only; after a NaN loss the save raises TrainingStopped on both
    ranks (the verdict is shared) and nothing is written."""
    results = _torchrun_results(tmp_path, "stop")
    assert [(r["rank"], r["save"]) for r in results] == [(0, "stopped"), (1, "stopped")]
    assert "nan" in results[0]["reason"] and "another rank" in results[1]["reason"]
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").rglob("*"))


def test_a_bad_alert_state_is_refused_by_name(tmp_path: Path) -> None:
    """A saved baseline that is not a list of numbers is refused with the key named, raised to
    the caller of load_state_dict although rules are restored on the background thread."""
    with trainmon.Monitor(_alert_config(tmp_path)) as monitor:
        state = monitor.state_dict()
        state["alerts"]["rules"]["spike"]["condition"] = {"values": "lots"}
        with pytest.raises(ValueError, match="'values' = 'lots'"):
            monitor.load_state_dict(state)


def test_csv_reading_keeps_the_last_row_of_a_step(tmp_path: Path) -> None:
    """DeepSpeed's CSV layout appended to by a resumed run: the last row of a step wins, a row
    cut short by a kill is skipped and counted, and summary's loader reads the folder."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train_loss.csv").write_text("step,loss\n1,1.0\n2,2.0\n3,3.0\n4,4\n3,30.0\n4,nan\n5")
    (folder / "perf_step_time_ms.csv").write_text("step,step_time_ms\n1,5.0\n2,5.")
    name, steps, values, skipped = read_metric_csv(folder / "train_loss.csv")
    assert (name, steps, values[:3], skipped) == ("train/loss", [1, 2, 3, 4], [1.0, 2.0, 30.0], 1)
    assert math.isnan(values[3])
    run = load_run(folder)
    assert run.source == "CSV files"
    assert sorted(run.series) == ["perf/step_time_ms", "train/loss"]
    assert run.series["perf/step_time_ms"].steps == [1, 2]  # "5." is a float: kept


class _ResumableWriter:
    """A user's writer (not a Writer subclass) with its own run identity and resume hook."""

    def __init__(self) -> None:
        self.resumed: list[tuple[int, Any]] = []

    def write(self, records: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def identity(self) -> dict[str, str]:
        return {"run": "r-1"}

    def resume(self, step: int, identity: Any) -> None:
        self.resumed.append((step, identity))


def test_a_custom_writer_keeps_its_identity_across_a_resume(tmp_path: Path) -> None:
    """A user's writer's identity() is saved under its kind and handed to its resume()."""
    from trainmon.writers import register_writer, unregister_writer

    built: list[_ResumableWriter] = []

    def factory() -> _ResumableWriter:
        built.append(_ResumableWriter())
        return built[-1]

    register_writer("resumable-test-writer", factory)
    try:
        config = {"console": {"enabled": False}, "writers": [{"class": "resumable-test-writer"}]}
        with trainmon.Monitor(config) as first:
            first.step = 4
            state = first.state_dict()
        assert state["writers"] == {"custom": {"run": "r-1"}}
        with trainmon.Monitor(config) as second:
            second.load_state_dict(state)
        assert built[1].resumed == [(5, {"run": "r-1"})]
    finally:
        unregister_writer("resumable-test-writer")


def test_the_fp16_grad_scaler_comes_back(tmp_path: Path) -> None:
    """With fp16 the GradScaler's scale and growth tracker are saved and loaded."""
    fp16 = {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 2}
    try:
        engine = _engine(tmp_path / "a", fp16=fp16)
    except trainmon.ConfigError as exc:
        pytest.skip(f"fp16 on the CPU is not supported by this torch: {exc}")
    _train(engine, 3)  # two clean steps in a window of 2: the scale grows once
    engine.save_checkpoint(str(tmp_path / "ckpt"))
    engine.close()
    other = _engine(tmp_path / "b", fp16=fp16)
    other.load_checkpoint(str(tmp_path / "ckpt"))
    _train(other, 1)
    other.close()
    scales = [v for _, v in _journal_values(tmp_path / "a" / "job", "train/loss_scale")]
    resumed = _journal_values(tmp_path / "b" / "job", "train/loss_scale")
    assert scales[0] == 256.0 and scales[-1] == 512.0  # it grew in the first run
    assert resumed == [(4, 1024.0)]  # a fresh scaler would say 256 here


def test_timeline_read_as_a_stream_matches_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timeline.from_file (for streaming readers) gives the same cutoff for every line as the
    in-memory form, across chunk boundaries, and none for a journal of one attempt."""
    import trainmon.journal
    from trainmon.journal import Timeline

    monkeypatch.setattr(trainmon.journal, "_SCAN_CHUNK", 7)  # markers cross chunk boundaries

    lines = [b'{"kind":"scalars","step":%d,"values":{}}' % i for i in range(1, 30)]
    lines.insert(0, b'{"v":1,"kind":"meta","time":0}')
    lines.insert(12, b'{"v":1,"kind":"meta","time":1}')
    lines.insert(13, b'{"v":1,"kind":"resume","step":6,"time":1}')
    lines.insert(25, b'{"v":1,"kind":"meta","time":2}')  # from scratch: its first step is 23
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    whole = Timeline(path.read_bytes().split(b"\n"))
    streamed = Timeline.from_file(path)
    assert [streamed.at(n) for n in range(len(lines))] == [whole.at(n) for n in range(len(lines))]
    again = Timeline(path.read_bytes().split(b"\n"))  # at() only moves forward
    assert (again.at(0), again.at(12), again.at(13), again.at(24), again.at(26)) == (
        6,
        6,
        23,
        23,
        math.inf,
    )
    (tmp_path / "plain.jsonl").write_bytes(b"\n".join(lines[:12]))
    assert not Timeline.from_file(tmp_path / "plain.jsonl")
