"""The writer contract, checked on every backend with the same events.

Each backend gets the same per-step records and windows through a
:class:`~trainmon.writers.WriterGroup` whose first writer raises on every call, and is read
back with the backend's own reader: TensorBoard's ``EventAccumulator``, the ``csv`` module,
``trainmon.read_journal``, the console's text, W&B's transaction-log decoder,
prometheus_client's text parser (exporter), the Pushgateway's HTTP API, ``MlflowClient``, the
calls a fake ``comet_ml`` recorded, and a user writer's own memory. For every one:

* what comes out is what went in: every step's values (the latest values for Prometheus,
  whose model is "current value"; window means for the console);
* after ``flush`` it is there for readers (W&B excepted: W&B keeps its last row open until the
  run finishes, so it is read after close);
* ``close`` may be called again; what was written stays readable;
* the writer before it raising on every call changed nothing for it.

Each backend runs once per module (servers and stores are module-scoped); a backend whose
package or server binary is missing is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from trainmon.config import CometConfig, MlflowConfig, PrometheusConfig, WandbConfig
from trainmon.core.aggregate import WindowAggregator, WindowStats
from trainmon.core.events import StepScalars
from trainmon.journal import read_journal
from trainmon.testing import MemoryWriter
from trainmon.writers import Writer, WriterGroup, register_writer, unregister_writer
from trainmon.writers.console import format_value
from trainmon.writers.custom import build_custom_writer
from trainmon.writers.files import safe_file_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "alerts"))
from servers import get_json, missing_binary, start_pushgateway

History = dict[int, dict[str, float]]
Latest = dict[str, float]

EVENTS = [
    StepScalars(0, 1_700_000_000.0, {"eval/acc": 0.5, "data/count": 7}),
    StepScalars(1, 1_700_000_001.5, {"eval/acc": 0.1 + 0.2, "data/count": -3}),
    StepScalars(2, 1_700_000_002.0, {"eval/acc": math.nan, "data/count": 2**40}),
    StepScalars(3, 1_700_000_003.25, {"eval/acc": 1 / 3, "data/count": 0}),
    StepScalars(5, 1_700_000_005.0, {"eval/acc": 0.875}),
]
WINDOW_STEPS = 2


def _windows() -> list[WindowStats]:
    aggregator = WindowAggregator(WINDOW_STEPS)
    windows = aggregator.add(EVENTS)
    last = aggregator.close()
    return [*windows, *([last] if last is not None else [])]


def expected_history() -> History:
    return {r.step: {k: float(v) for k, v in r.values.items()} for r in EVENTS}


def expected_latest() -> Latest:
    latest: Latest = {}
    for record in EVENTS:
        latest.update({k: float(v) for k, v in record.values.items()})
    return latest


def expected_console() -> list[tuple[int, dict[str, str]]]:
    return [
        (w.last_step, {name: format_value(m.mean) for name, m in w.metrics.items()})
        for w in _windows()
    ]


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        return got == want or (math.isnan(got) and math.isnan(want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, tuple) and isinstance(want, tuple):
        return _same(list(got), list(want))
    return bool(got == want)


# ---- one backend, set up, fed and read back ------------------------------------------------


@dataclass
class Harness:
    """How to start one backend's writer and read back what it stored."""

    start: Callable[[], Writer]
    read: Callable[[Writer], Any]
    shape: Literal["history", "latest", "console"] = "history"
    float32: bool = False
    visible_after_flush: bool = True
    readable_after_close: bool = True


@dataclass
class Outcome:
    """What one backend showed at each point of the scenario."""

    shape: str
    float32: bool
    after_flush: Any
    after_close: Any
    second_close_error: BaseException | None
    group_errors: int
    extra: dict[str, Any] = field(default_factory=dict)


class Exploding(Writer):
    """A writer that raises on every call: it must cost the others nothing."""

    kind = "exploding"

    def write(self, records: Sequence[StepScalars]) -> None:
        raise OSError("disk full")

    def write_windows(self, windows: Sequence[WindowStats]) -> None:
        raise OSError("disk full")

    def flush(self) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        raise OSError("disk full")


def run_scenario(harness: Harness) -> Outcome:
    """Exploding writer first, then the backend: write, windows, flush, read, close twice,
    read again."""
    writer = harness.start()
    group = WriterGroup([Exploding(), writer])
    group.write(EVENTS)
    group.write_windows(_windows())
    group.flush()
    after_flush = harness.read(writer) if harness.visible_after_flush else None
    group.close()
    second_close_error = None
    try:
        writer.close()
    except BaseException as exc:  # the test reports it
        second_close_error = exc
    after_close = harness.read(writer) if harness.readable_after_close else None
    return Outcome(
        harness.shape,
        harness.float32,
        after_flush,
        after_close,
        second_close_error,
        group.error_count,
    )


# ---- the harnesses -------------------------------------------------------------------------


def _tensorboard(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainmon.writers.tensorboard import TensorBoardWriter

    def read(_: Writer) -> History:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        history: History = {}
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                history.setdefault(event.step, {})[tag] = event.value
        return history

    yield Harness(lambda: TensorBoardWriter(folder), read, float32=True)


def _csv(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    from trainmon.writers.csv import CsvWriter

    def read(_: Writer) -> History:
        history: History = {}
        for name in expected_latest():
            with (folder / safe_file_name(name, ".csv")).open(newline="") as f:
                rows = list(csv.reader(f))
            assert rows[0] == ["step", name.rsplit("/", 1)[-1]]
            for step, value in rows[1:]:
                history.setdefault(int(step), {})[name] = float(value)
        return history

    yield Harness(lambda: CsvWriter(folder), read)


def _jsonl(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    from trainmon.writers.jsonl import JsonlWriter

    def read(_: Writer) -> History:
        journal = read_journal(folder / "metrics.jsonl")
        return {
            r["step"]: {k: float(v) for k, v in r["values"].items()}
            for r in journal
            if r["kind"] == "scalars"
        }

    yield Harness(lambda: JsonlWriter(folder, "job"), read)


def _console(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    from trainmon.writers.console import ConsoleWriter

    stream = io.StringIO()

    def read(_: Writer) -> list[tuple[int, dict[str, str]]]:
        lines = []
        for line in stream.getvalue().splitlines():
            head, *parts = line.split(" | ")
            step = int(re.fullmatch(r"step (\d+)", head).group(1))  # type: ignore[union-attr]
            lines.append((step, dict(part.rsplit(" ", 1) for part in parts)))
        return lines

    yield Harness(lambda: ConsoleWriter(stream), read, shape="console")


def _wandb(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    pytest.importorskip("wandb")
    from test_wandb import _isolate, _teardown_wandb, read_run

    from trainmon.writers.wandb import WandbWriter

    def read(writer: Writer) -> History:
        history = read_run(Path(writer.local_dir)).history()  # type: ignore[attr-defined]
        return {step: {k: float(v) for k, v in row.items()} for step, row in history}

    with pytest.MonkeyPatch.context() as mp:
        _teardown_wandb()
        _isolate(mp, folder / "home")
        section = WandbConfig(enabled=True, project="p", dir=str(folder), mode="offline")
        try:
            yield Harness(lambda: WandbWriter(section), read, visible_after_flush=False)
        finally:
            _teardown_wandb()


def _prometheus_exporter(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    pytest.importorskip("prometheus_client")
    from test_prometheus import scrape

    from trainmon.writers.prometheus import PrometheusWriter

    def read(writer: Writer) -> Latest:
        samples = scrape(writer.url)  # type: ignore[attr-defined]
        return {dict(labels)["metric"]: value for (_, labels), value in samples.items()}

    section = PrometheusConfig(enabled=True, port=0, job="contract")
    yield Harness(
        lambda: PrometheusWriter(section), read, shape="latest", readable_after_close=False
    )


def _pushgateway(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    pytest.importorskip("prometheus_client")
    reason = missing_binary("prometheus-pushgateway")
    if reason:
        pytest.skip(reason)
    from trainmon.writers.prometheus import PrometheusWriter

    daemon = start_pushgateway(folder / "gateway")

    def read(_: Writer) -> Latest:
        latest: Latest = {}
        for group in get_json(daemon.url + "/api/v1/metrics")["data"]:
            if group["labels"].get("job") == "contract":
                for name, family in group.items():
                    if name.startswith("trainmon_"):
                        for metric in family["metrics"]:
                            latest[metric["labels"]["metric"]] = float(metric["value"])
        return latest

    section = PrometheusConfig(
        enabled=True, serve=False, job="contract", pushgateway_url=daemon.url, push_interval_s=0
    )
    try:
        yield Harness(lambda: PrometheusWriter(section), read, shape="latest")
    finally:
        daemon.stop()


def _mlflow(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow import MlflowClient

    from trainmon.writers.mlflow import MlflowWriter

    uri = f"sqlite:///{folder / 'mlflow.db'}"

    def read(writer: Writer) -> History:
        client = MlflowClient(tracking_uri=uri)
        history: History = {}
        for name in expected_latest():
            for metric in client.get_metric_history(writer.run_id, name):  # type: ignore[attr-defined]
                history.setdefault(metric.step, {})[name] = metric.value
        return history

    section = MlflowConfig(enabled=True, tracking_uri=uri, experiment="contract")
    yield Harness(lambda: MlflowWriter(section), read)


def _comet(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    pytest.importorskip("comet_ml")
    from comet_offline import QUIET_ENV, only_experiment

    from trainmon.writers.comet import CometWriter

    offline = folder / "comet-offline"
    offline.mkdir()

    def read(_: Writer) -> History:
        return {
            step: values
            for step, values in only_experiment(offline).logged().items()
            if step is not None
        }

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("COMET_API_KEY", raising=False)
        for key, value in {**QUIET_ENV, "COMET_OFFLINE_DIRECTORY": str(offline)}.items():
            mp.setenv(key, value)
        section = CometConfig(enabled=True, online=False, samples_log_interval=0)
        # Comet archives an offline experiment when it ends: readable after close only
        yield Harness(lambda: CometWriter(section), read, visible_after_flush=False)


def _custom(folder: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    def read(writer: Writer) -> History:
        assert isinstance(writer, MemoryWriter)
        return {r.step: {k: float(v) for k, v in r.values.items()} for r in writer.flushed}

    register_writer("contract-memory", MemoryWriter)
    try:
        yield Harness(
            lambda: build_custom_writer(0, {"class": "contract-memory", "label": "x"}), read
        )
    finally:
        unregister_writer("contract-memory")


HARNESSES: dict[str, Callable[[Path, pytest.FixtureRequest], Iterator[Harness]]] = {
    "tensorboard": _tensorboard,
    "csv": _csv,
    "jsonl": _jsonl,
    "console": _console,
    "wandb": _wandb,
    "prometheus-exporter": _prometheus_exporter,
    "pushgateway": _pushgateway,
    "mlflow": _mlflow,
    "comet": _comet,
    "custom": _custom,
}


#: Backends whose harness starts a server process: slow, like the other real-server tests.
SLOW = {"pushgateway", "comet"}


@pytest.fixture(
    scope="module",
    params=[pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in HARNESSES],
)
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The scenario run once per backend."""
    folder = tmp_path_factory.mktemp(request.param)
    with contextlib.contextmanager(HARNESSES[request.param])(folder, request) as harness:
        return run_scenario(harness)


def _expected(result: Outcome) -> Any:
    if result.shape == "console":
        return expected_console()
    if result.shape == "latest":
        return expected_latest()
    history = expected_history()
    if result.float32:
        return {s: {k: _f32(v) for k, v in values.items()} for s, values in history.items()}
    return history


# ---- the contract ---------------------------------------------------------------------------


def test_flushed_values_read_back_with_the_backends_own_reader(outcome: Outcome) -> None:
    """After flush, the backend's own reader returns exactly the values written, at their
    steps (the latest values for Prometheus, window means for the console)."""
    got = outcome.after_flush if outcome.after_flush is not None else outcome.after_close
    assert _same(got, _expected(outcome)), (got, _expected(outcome))


def test_close_can_be_called_again_and_the_data_stays(outcome: Outcome) -> None:
    """A second close raises nothing, and what was written still reads back after close."""
    assert outcome.second_close_error is None
    if outcome.after_close is not None:
        assert _same(outcome.after_close, _expected(outcome))


def test_a_writer_that_raises_does_not_stop_the_others(outcome: Outcome) -> None:
    """The exploding writer before it failed in write, write_windows, flush and close, each
    failure counted by the group, and this backend still got everything (checked above)."""
    assert outcome.group_errors == 4
    assert outcome.after_flush is not None or outcome.after_close is not None


def test_importing_trainmon_and_its_writers_imports_no_optional_backend() -> None:
    """import trainmon (and trainmon.writers) imports none of the optional SDKs."""
    code = (
        "import sys, trainmon, trainmon.writers\n"
        "from trainmon.writers import register_writer\n"
        "heavy = ('prometheus_client', 'mlflow', 'comet_ml', 'wandb', 'tensorboard', 'torch')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_every_backend_with_a_config_section_is_covered() -> None:
    """Each writer trainmon can build from the config has a harness here."""
    from trainmon.writers import BACKENDS

    covered = {
        "tensorboard": "tensorboard",
        "csv_monitor": "csv",
        "jsonl": "jsonl",
        "console": "console",
        "wandb": "wandb",
        "prometheus": "prometheus-exporter",
        "mlflow": "mlflow",
        "comet": "comet",
    }
    assert {backend.section for backend in BACKENDS} == covered.keys()
    assert set(covered.values()) | {"pushgateway", "custom"} == set(HARNESSES)
