"""The W&B writer, run against the real wandb package offline and read back with wandb's reader.

Runs are read from their ``.wandb`` transaction log by wandb-core's own decoder (the one behind
``wandb leet inspect --json``), so what is checked is what ``wandb sync`` would upload.
Nothing here touches the network: every test gets a fresh HOME, no API key and no netrc.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import trainmon
import trainmon.extras
from trainmon.config import WandbConfig, load_config
from trainmon.core.place import ProcessPlace
from trainmon.errors import ConfigError, MissingExtraError
from trainmon.journal import read_journal

needs_wandb = pytest.mark.skipif(
    not trainmon.extras.is_installed("wandb"), reason='needs pip install "trainmon[wandb]"'
)

_WANDB_ENV = (
    "WANDB_API_KEY",
    "WANDB_IDENTITY_TOKEN_FILE",
    "WANDB_MODE",
    "WANDB_BASE_URL",
    "WANDB_SILENT",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_NAME",
    "WANDB_RUN_GROUP",
    "WANDB_TAGS",
    "WANDB_RUN_ID",
    "WANDB_RESUME",
    "WANDB_CONSOLE",
)


def _isolate(mp: pytest.MonkeyPatch, home: Path, mode: str | None = "offline") -> None:
    """No credentials, no user settings, no network: a fresh HOME and W&B variables cleared."""
    for name in _WANDB_ENV:
        mp.delenv(name, raising=False)
    home.mkdir(parents=True, exist_ok=True)
    mp.setenv("HOME", str(home))
    mp.setenv("NETRC", str(home / ".netrc"))  # absent
    mp.setenv("WANDB_CONFIG_DIR", str(home / ".config" / "wandb"))
    mp.setenv("WANDB_CACHE_DIR", str(home / ".cache" / "wandb"))
    mp.setenv("WANDB_DATA_DIR", str(home / ".local" / "wandb"))
    mp.setenv("WANDB_DISABLE_GIT", "true")
    if mode is not None:
        mp.setenv("WANDB_MODE", mode)


def _teardown_wandb() -> None:
    """Drop W&B's process-wide state (settings read from the environment, service process)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()


@pytest.fixture
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated environment with ``WANDB_MODE=offline``; yields the folder for W&B's files."""
    pytest.importorskip("wandb")
    _teardown_wandb()
    _isolate(monkeypatch, tmp_path / "home")
    yield tmp_path / "wb"
    _teardown_wandb()


def _config(base: Path, **wandb: Any) -> dict[str, Any]:
    return {
        "steps_per_print": 2,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "wandb": {"enabled": True, "project": "p", "dir": str(base / "wb"), **wandb},
    }


# ---- reading a run back -------------------------------------------------------------------


@dataclass
class RunLog:
    """The records of one run's ``.wandb`` file, as wandb-core decodes them."""

    directory: Path
    records: list[dict[str, Any]]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [r[kind] for r in self.records if r.get("type") == kind]

    def history(self) -> list[tuple[int, dict[str, Any]]]:
        """(step, user metrics) per history row; W&B's own ``_step``/``_runtime``/... left out."""
        rows = []
        for history in self.of_type("history"):
            item = {k: _decode(v) for k, v in history["item"].items() if not k.startswith("_")}
            rows.append((int(history["step"]["num"]), item))
        return rows

    def run(self) -> dict[str, Any]:
        (run,) = self.of_type("run")
        return run


def _decode(value: Any) -> Any:
    """W&B stores non-finite floats as the JSON strings NaN, Infinity and -Infinity."""
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    return value


def read_run(run_dir: Path) -> RunLog:
    """Decode ``run-*.wandb`` in ``run_dir`` with wandb-core's reader (``wandb leet inspect``)."""
    from wandb.util import get_core_path

    (wandb_file,) = run_dir.glob("run-*.wandb")
    done = subprocess.run(
        [
            get_core_path(),
            "leet",
            "inspect",
            "--no-observability",
            "--json",
            "--run-file",
            str(wandb_file),
            str(run_dir.parent),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return RunLog(run_dir, [json.loads(line) for line in done.stdout.splitlines() if line])


def _only_run_dir(wandb_dir: Path) -> Path:
    (run_dir,) = (wandb_dir / "wandb").glob("offline-run-*")
    return run_dir


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _same_rows(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def _journal_steps(base: Path) -> list[int]:
    """Steps at which the JSONL journal recorded ``train/loss``."""
    journal = read_journal(base / "job" / "metrics.jsonl")
    return [r["step"] for r in journal if r["kind"] == "scalars" and "train/loss" in r["values"]]


def _wandb_core_children() -> list[Any]:
    psutil = pytest.importorskip("psutil")
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if "wandb-core" in " ".join(child.cmdline())
    ]


# ---- one run through a full Monitor, shared by the tests below ----------------------------


@dataclass
class SharedRun:
    run: RunLog
    journal: list[dict[str, Any]]
    warnings: list[str]
    services_left: int


_LOGGED: list[tuple[int, dict[str, float]]] = [
    (0, {"train/loss": 2.5, "train/lr": 1e-3}),
    (1, {"train/loss": 0.1 + 0.2, "train/lr": 1e-3}),
    (2, {"train/loss": math.nan, "train/lr": 5e-4}),
    (3, {"train/loss": math.inf, "train/lr": -math.inf}),
    (4, {"train/loss": 1 / 3, "train/lr": 2.5e-4}),
]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRun]:
    """Five steps (NaN, Inf, a step logged in two calls, a late lower step) through a Monitor."""
    pytest.importorskip("wandb")
    base = tmp_path_factory.mktemp("shared")
    warnings: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = _Keep()
    logging.getLogger("trainmon").addHandler(handler)
    with pytest.MonkeyPatch.context() as mp:
        _teardown_wandb()
        _isolate(mp, base / "home")
        config = _config(
            base,
            name="shared-run",
            group="grp",
            tags=["a", "b"],
            config={"lr": 1e-3, "layers": [64, 64], "optimizer": {"name": "adam"}},
        )
        try:
            monitor = trainmon.Monitor(config)
            for step, values in _LOGGED:
                if step == 4:  # one step in two calls and two batches: one W&B row
                    monitor.log({"train/loss": values["train/loss"]}, step=step)
                    monitor.flush()
                    monitor.log({"train/lr": values["train/lr"]}, step=step)
                else:
                    monitor.log(values, step=step)
            monitor.flush()
            monitor.log({"eval/acc": 0.5}, step=1)  # below step 4, already logged
            monitor.close()
            services_left = len(_wandb_core_children())
        finally:
            logging.getLogger("trainmon").removeHandler(handler)
            _teardown_wandb()
    yield SharedRun(
        read_run(_only_run_dir(base / "wb")),
        list(read_journal(base / "job" / "metrics.jsonl")),
        warnings,
        services_left,
    )


@needs_wandb
def test_every_step_reads_back_with_its_exact_values(shared_run: SharedRun) -> None:
    """Each step is one W&B history row at that step holding exactly the logged floats."""
    rows = shared_run.run.history()
    assert [step for step, _ in rows] == [step for step, _ in _LOGGED]
    for (_, got), (_, want) in zip(rows, _LOGGED, strict=True):
        assert _same_rows(got, want), (got, want)


@needs_wandb
def test_a_lower_step_is_left_out_of_wandb_with_one_warning(shared_run: SharedRun) -> None:
    """A step below one already logged is dropped by W&B's writer only, with one warning."""
    history_keys = {key for _, row in shared_run.run.history() for key in row}
    assert "eval/acc" not in history_keys
    late = [r for r in shared_run.journal if r["kind"] == "scalars" and "eval/acc" in r["values"]]
    assert [(r["step"], r["values"]["eval/acc"]) for r in late] == [(1, 0.5)]
    dropped = [w for w in shared_run.warnings if "increasing steps" in w]
    assert len(dropped) == 1 and "step 1" in dropped[0]
    # WANDB_MODE=offline: no fallback warning; the NaN the run logs on purpose gets the
    # built-in health check's warning, which is not W&B's
    assert [w for w in shared_run.warnings if "first non-finite value" not in w] == dropped


@needs_wandb
def test_name_group_tags_and_hyperparameters_land_in_the_run(shared_run: SharedRun) -> None:
    """The run record carries the configured name, group, tags, project and config."""
    run = shared_run.run.run()
    assert run["display_name"] == "shared-run"
    assert run["run_group"] == "grp"
    assert run["tags"] == ["a", "b"]
    assert run["project"] == "p"
    config = {k: v for k, v in run["config"]["update"].items() if k != "_wandb"}
    assert config == {"lr": 1e-3, "layers": [64, 64], "optimizer": {"name": "adam"}}


@needs_wandb
def test_close_finishes_the_run_and_stops_the_service(shared_run: SharedRun) -> None:
    """close() finishes the run (exit code 0) and no wandb-core process outlives it."""
    assert shared_run.run.of_type("exit") == [{"exit_code": 0}]
    assert shared_run.services_left == 0


@needs_wandb
def test_two_monitors_in_one_process_keep_separate_runs(wandb_env: Path, tmp_path: Path) -> None:
    """Two live monitors get two runs; closing the first leaves the second logging."""
    first = trainmon.Monitor(_config(tmp_path / "a", name="first"))
    second = trainmon.Monitor(_config(tmp_path / "b", name="second"))
    first.log({"train/loss": 1.0}, step=1)
    second.log({"train/loss": 2.0}, step=1)
    first.close()
    second.log({"train/loss": 3.0}, step=2)
    second.close()
    for base, name, history in (
        (tmp_path / "a", "first", [(1, {"train/loss": 1.0})]),
        (tmp_path / "b", "second", [(1, {"train/loss": 2.0}), (2, {"train/loss": 3.0})]),
    ):
        run = read_run(_only_run_dir(base / "wb"))
        assert run.run()["display_name"] == name
        assert run.history() == history
        assert run.of_type("exit") == [{"exit_code": 0}]
    assert _wandb_core_children() == []


# ---- mode selection and fallbacks ---------------------------------------------------------


@needs_wandb
def test_without_api_key_it_logs_offline_with_one_warning(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """No key, no mode, no WANDB_MODE: offline, and one warning giving the wandb sync command."""
    monkeypatch.delenv("WANDB_MODE")
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log({"train/loss": 1.5}, step=3)
    run_dir = _only_run_dir(wandb_env)
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert warnings == [
        "no W&B API key was found (WANDB_API_KEY, ~/.netrc or `wandb login`), so the W&B run "
        f"is logged offline to {run_dir}; upload it later with: wandb sync {run_dir}"
    ]
    assert read_run(run_dir).history() == [(3, {"train/loss": 1.5})]


@needs_wandb
def test_wandb_mode_variable_is_respected_when_mode_is_null(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """WANDB_MODE=disabled wins over the no-key fallback: no W&B files, no warning."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log({"train/loss": 1.5}, step=1)
    assert not wandb_env.exists() or not any(wandb_env.rglob("*.wandb"))
    assert [r for r in trainmon_logs if r.levelno >= logging.WARNING] == []


@needs_wandb
def test_disabled_mode_writes_nothing_and_the_other_writers_carry_on(
    wandb_env: Path, tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """mode "disabled" logs into a no-op run: no W&B files, no warning, JSONL complete."""
    with trainmon.Monitor(_config(tmp_path, mode="disabled")) as monitor:
        for step in range(3):
            monitor.log({"train/loss": float(step)}, step=step)
    assert not wandb_env.exists() or not any(wandb_env.rglob("*.wandb"))
    assert _journal_steps(tmp_path) == [0, 1, 2]
    assert [r for r in trainmon_logs if r.levelno >= logging.WARNING] == []


@needs_wandb
def test_a_failing_online_start_falls_back_to_offline(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """wandb.init raising online gives one warning naming the error, then an offline run."""
    import wandb

    real_init: Any = wandb.init

    def init(*args: Any, mode: str | None = None, **kwargs: Any) -> Any:
        if mode == "online":
            raise ConnectionError("api.wandb.ai unreachable")
        return real_init(*args, mode=mode, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    with trainmon.Monitor(_config(tmp_path, mode="online")) as monitor:
        monitor.log({"train/loss": 0.25}, step=7)
    run_dir = _only_run_dir(wandb_env)
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert "wandb.init failed (ConnectionError: api.wandb.ai unreachable)" in warning
    assert f"wandb sync {run_dir}" in warning
    assert read_run(run_dir).history() == [(7, {"train/loss": 0.25})]


@needs_wandb
def test_a_key_in_netrc_means_online_is_tried_first(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """An api.wandb.ai entry in the netrc file is found locally, so no offline fallback is taken."""
    import wandb

    netrc = Path(os.environ["NETRC"])
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {'k' * 40}\n")
    netrc.chmod(0o600)
    monkeypatch.delenv("WANDB_MODE")
    real_init: Any = wandb.init
    modes: list[str | None] = []

    def init(*args: Any, mode: str | None = None, **kwargs: Any) -> Any:
        modes.append(mode)
        if mode is None:
            raise ConnectionError("no network in tests")
        return real_init(*args, mode=mode, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    with trainmon.Monitor(_config(tmp_path)):
        pass
    assert modes == [None, "offline"]
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert warning.startswith("wandb.init failed (ConnectionError: no network in tests)")


@needs_wandb
def test_when_offline_fails_too_only_this_writer_is_skipped(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """wandb.init failing online and offline leaves W&B out with a warning; JSONL carries on."""
    import wandb

    def init(*args: Any, **kwargs: Any) -> Any:
        raise OSError("read-only file system")

    monkeypatch.setattr(wandb, "init", init)
    with trainmon.Monitor(_config(tmp_path, mode="online")) as monitor:
        monitor.log({"train/loss": 0.25}, step=1)
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "wandb writer disabled" in warnings[0] and "read-only file system" in warnings[0]
    assert _journal_steps(tmp_path) == [1]


@needs_wandb
def test_a_wandb_error_while_logging_spares_the_other_writers(
    wandb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trainmon_logs: list[logging.LogRecord],
) -> None:
    """run.log raising is reported once, W&B is not called again, JSONL keeps every step."""
    from wandb.sdk.wandb_run import Run

    calls = []

    def log(self: Any, data: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        calls.append(step)
        raise RuntimeError("wandb internal error")

    monkeypatch.setattr(Run, "log", log)
    with trainmon.Monitor(_config(tmp_path)) as monitor:
        for step in range(4):
            monitor.log({"train/loss": float(step)}, step=step)
            monitor.flush()  # one batch per step
    assert calls == [0]
    warnings = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and "wandb writer" in warnings[0] and "failed in write" in warnings[0]
    assert "not delivered" in warnings[1] and "wandb writer" in warnings[1]  # counted at close
    assert _journal_steps(tmp_path) == [0, 1, 2, 3]
    assert read_run(_only_run_dir(wandb_env)).of_type("exit") == [{"exit_code": 0}]


# ---- construction ------------------------------------------------------------------------


@needs_wandb
def test_per_rank_runs_are_named_by_rank_and_grouped_by_job(wandb_env: Path) -> None:
    """With per-rank output, rank 1 logs run "<job>-rank1" (id suffixed too) in group "<job>"."""
    from trainmon.writers.wandb import WandbWriter

    config = load_config(
        {
            "trainmon": {"per_rank_output": True},
            "jsonl": {"enabled": True, "output_path": str(wandb_env), "job_name": "exp7"},
            "wandb": {"enabled": True, "dir": str(wandb_env), "id": "abc"},
        }
    )
    writer = WandbWriter.from_config(config, ProcessPlace(1, 2))
    writer.close()
    writer.close()  # idempotent
    (run_dir,) = (wandb_env / "wandb").glob("offline-run-*")
    run = read_run(run_dir).run()
    assert (run["display_name"], run["run_group"], run["run_id"]) == (
        "exp7-rank1",
        "exp7",
        "abc-rank1",
    )


def test_team_and_entity_that_differ_are_a_config_error() -> None:
    """wandb.team and wandb.entity name the same thing: two different values are rejected."""
    from trainmon.writers.wandb import WandbWriter

    with pytest.raises(ConfigError, match=r"'wandb\.team' = 'a' and 'wandb\.entity' = 'b'"):
        WandbWriter(WandbConfig(enabled=True, team="a", entity="b"))


def test_missing_wandb_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enabling W&B without the wandb package raises MissingExtraError with the pip command."""
    real = trainmon.extras.is_installed
    monkeypatch.setattr(trainmon.extras, "is_installed", lambda m: m != "wandb" and real(m))
    with pytest.raises(MissingExtraError, match=r'pip install "trainmon\[wandb\]"'):
        trainmon.Monitor(_config(tmp_path))


@needs_wandb
@pytest.mark.slow
def test_nothing_but_the_fallback_warning_reaches_the_terminal(tmp_path: Path) -> None:
    """A process logging to W&B without a key prints one trainmon warning and nothing else."""
    script = textwrap.dedent(
        f"""
        import trainmon
        config = {_config(tmp_path)!r}
        with trainmon.Monitor(config) as monitor:
            for step in range(3):
                monitor.log({{"train/loss": 1.0 / (step + 1)}}, step=step)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        NETRC=str(home / ".netrc"),
        WANDB_CONFIG_DIR=str(home / ".config" / "wandb"),
        WANDB_CACHE_DIR=str(home / ".cache" / "wandb"),
        WANDB_DATA_DIR=str(home / ".local" / "wandb"),
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("[trainmon] [Rank 0] WARNING no W&B API key was found")
    assert "wandb sync " in lines[0]
    assert len(read_run(_only_run_dir(tmp_path / "wb")).history()) == 3


# ---- resuming from a checkpoint -----------------------------------------------------------


@needs_wandb
def test_a_resumed_monitor_continues_the_saved_wandb_run_offline(
    wandb_env: Path, tmp_path: Path
) -> None:
    """load_state_dict switches to the saved run id: its second offline folder carries the same
    id (``wandb sync --append`` adds it to the run), holds the resumed steps, and the run
    started for the resumed process is gone."""
    base = tmp_path / "r"
    first = trainmon.Monitor(_config(base))
    for step in range(1, 9):
        first.log({"train/loss": float(step)}, step=step)
    state = json.loads(json.dumps({**first.state_dict(), "step": 5}))
    first.close()
    (first_dir,) = (base / "wb" / "wandb").glob("offline-run-*")
    saved_id = state["writers"]["wandb"]["run_id"]
    assert first_dir.name.endswith(saved_id)

    second = trainmon.Monitor(_config(base))
    second.load_state_dict(state)
    for step in range(6, 11):
        second.log({"train/loss": 100.0 + step}, step=step)
    second.close()
    # both folders hold the saved run (W&B adds "-1" to the second folder's name when both
    # runs started within the same second): told apart by what they hold, not by name
    folders = list((base / "wb" / "wandb").glob("offline-run-*"))
    assert len(folders) == 2
    assert all((f / f"run-{saved_id}.wandb").is_file() for f in folders), folders
    runs = sorted((read_run(f) for f in folders), key=lambda r: r.history()[0][0])
    assert [r.run()["run_id"] for r in runs] == [saved_id, saved_id]
    assert [s for s, _ in runs[0].history()] == list(range(1, 9))
    assert runs[1].history() == [(s, {"train/loss": 100.0 + s}) for s in range(6, 11)]


# ---- histograms, text and hyper-parameters -------------------------------------------------


@needs_wandb
def test_histograms_text_and_hparams_reach_the_wandb_run(wandb_env: Path, tmp_path: Path) -> None:
    """A histogram is a W&B histogram at its step (counts and edges as binned), text is a table
    file with the step and text, hyper-parameters land in the run's config."""
    import numpy as np

    monitor = trainmon.Monitor(_config(tmp_path, dir=str(wandb_env)))
    values = np.array([0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0])
    monitor.log({"train/loss": 1.0}, step=1)
    monitor.log_histogram("weights", values, step=1, bins=4)
    values[:] = 100.0  # changed after the call: not what was logged
    monitor.log_text("sample", "the quick brown fox", step=2)
    monitor.log_hparams({"lr": 0.001, "optimizer": {"name": "adam"}})
    monitor.close()
    run = read_run(_only_run_dir(wandb_env))
    rows = dict(run.history())

    def media(step: int, name: str) -> dict[str, Any]:
        """W&B's decoder flattens a media value into ``name.<field>`` keys."""
        return {k[len(name) + 1 :]: v for k, v in rows[step].items() if k.startswith(name + ".")}

    histogram = media(1, "weights")
    assert histogram["_type"] == "histogram"
    assert histogram["values"] == [1, 2, 1, 4]
    assert histogram["bins"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rows[1]["train/loss"] == 1.0
    table = media(2, "sample")
    assert table["_type"] == "table-file"
    written = json.loads((run.directory / "files" / table["path"]).read_text())
    assert written["columns"] == ["step", "text"]
    assert written["data"] == [[2, "the quick brown fox"]]
    config: dict[str, Any] = {}
    for record in run.of_type("config"):
        config.update(record.get("update", {}))
    assert config["lr"] == 0.001
    assert config["optimizer.name"] == "adam"


@needs_wandb
@pytest.mark.parametrize(
    ("error", "exit_code"), [(RuntimeError("boom"), 1), (KeyboardInterrupt(), 255)]
)
def test_a_run_that_raises_ends_failed_or_aborted_in_wandb(
    wandb_env: Path, tmp_path: Path, error: BaseException, exit_code: int
) -> None:
    """An exception leaving ``with Monitor(...)`` finishes the W&B run with a non-zero exit
    code (1 failed, 255 aborted) instead of 0, and the values logged before it are there."""
    with pytest.raises(type(error)), trainmon.Monitor(_config(tmp_path)) as monitor:
        monitor.log({"train/loss": 1.5}, step=1)
        raise error
    run = read_run(_only_run_dir(wandb_env))
    assert run.of_type("exit") == [{"exit_code": exit_code}]
    assert run.history() == [(1, {"train/loss": 1.5})]
