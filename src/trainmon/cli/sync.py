"""``trainmon sync RUN --to BACKEND [WHERE]``: replay a run's journal into a backend after the
fact, through the same writer classes (and so the same layouts) as the live writers.

Every target is idempotent, so a sync can be repeated (after a crash of the sync itself, or
to push what a run logged since):

* ``tensorboard DIR`` writes ``DIR/<job>/``: a new set of event files that starts with
  TensorBoard's restart marker at step 0, so the files the live writer left there are
  superseded (for the readers that honour the marker: TensorBoard's Python ones, not its
  fast data server); the files of an earlier sync (listed in ``.trainmon-sync.json``) are
  removed, whatever the reader.
* ``csv DIR`` builds ``DIR/<job>/`` in a staging folder and moves each file over the old one.
* ``mlflow URI`` finds the run it made before by its ``trainmon.journal_run_id`` tag (or
  takes ``--run-id``) and logs only the (metric, step) values that run does not hold yet.
* ``wandb [PROJECT]`` logs to the run whose id is the journal's run id (or ``--run-id``),
  resumed: W&B keeps the steps it already has and takes only later ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson

from trainmon.cli.replay import Replay, load_replay
from trainmon.config import MlflowConfig, WandbConfig
from trainmon.core.events import Extra, Histogram, StepScalars
from trainmon.core.writer import Writer
from trainmon.report.model import RunError

BACKENDS = ("tensorboard", "mlflow", "wandb", "csv")
#: The MLflow tag (and W&B run id) that ties a synced run to its journal.
RUN_ID_TAG = "trainmon.journal_run_id"
MANIFEST = ".trainmon-sync.json"
#: Fewer steps than this replay without a progress bar.
PROGRESS_MIN_STEPS = 2000

Batch = tuple[Sequence[StepScalars], Sequence[Extra]]


def add_parser(commands: Any) -> None:
    """Register ``sync`` on the CLI's sub-parsers."""
    sync_ = commands.add_parser(
        "sync",
        help="replay a run's journal into TensorBoard, MLflow, W&B or CSV (idempotent)",
        description="Replay the journal's kept steps (a re-done step: the latest attempt's "
        "values), histograms, text and hyper-parameters into a backend; a second sync to the "
        "same destination adds nothing.",
    )
    sync_.add_argument("run", metavar="RUN")
    sync_.add_argument(
        "--to",
        nargs="+",
        required=True,
        metavar="BACKEND",
        help="tensorboard DIR | mlflow URI | wandb [PROJECT] | csv DIR",
    )
    sync_.add_argument(
        "--run-id", help="MLflow/W&B: the run to fill in (default: the one sync made before)"
    )
    sync_.add_argument("--experiment", help="MLflow experiment (MLFLOW_EXPERIMENT_NAME, Default)")
    sync_.add_argument("--entity", help="W&B entity (team)")
    sync_.set_defaults(handler=sync)


def sync(args: argparse.Namespace) -> int:
    """Replay ``args.run`` into ``args.to``, with a progress bar and the rate at the end."""
    kind, where = _destination(args.to)
    started = time.perf_counter()  # the rate covers reading the journal too
    replay = load_replay(args.run)
    parts = [f"{len(replay.steps):,} steps", f"{replay.value_count:,} values"]
    histograms = sum(1 for extra in replay.extras if isinstance(extra, Histogram))
    parts += [f"{histograms:,} histograms", f"{len(replay.extras) - histograms:,} texts"]
    if replay.hparams is not None:
        parts.append(f"{len(replay.hparams.hparams)} hyper-parameters")
    print(
        f"trainmon sync: {replay.job} ({replay.journal}, {replay.attempts} attempt(s)): "
        + ", ".join(parts),
        flush=True,
    )
    for note in replay.notes:
        print(f"  note: {note}", file=sys.stderr)
    target = _TARGETS[kind](replay, where, args)
    try:
        _replay_into(target.writer, replay, target.keep)
    except BaseException:
        with suppress(Exception):
            target.writer.finalize("aborted")
            target.writer.close()
        target.abandon()
        raise
    target.writer.finalize("success")
    target.writer.close()
    target.done()
    seconds = max(time.perf_counter() - started, 1e-9)
    sent = replay.value_count - target.skipped
    skipped = f"; {target.skipped:,} values were there already" if target.skipped else ""
    print(
        f"synced to {target.where} in {seconds:.2f} s ({len(replay.steps) / seconds:,.0f} "
        f"steps/s, {sent / seconds:,.0f} values/s{skipped})"
    )
    for note in target.notes:
        print(f"  {note}")
    return 0


def _destination(to: Sequence[str]) -> tuple[str, str | None]:
    kind, rest = to[0], list(to[1:])
    if kind not in BACKENDS:
        raise RunError(f"--to {kind}: expected one of {', '.join(BACKENDS)}")
    if len(rest) > 1:
        raise RunError(f"--to {' '.join(to)}: {kind} takes one place, got {len(rest)}")
    if not rest and kind != "wandb":
        what = "URI (e.g. sqlite:///mlflow.db)" if kind == "mlflow" else "DIR"
        raise RunError(f"--to {kind}: expected a {what} after it")
    return kind, (rest[0] if rest else None)


def _replay_into(
    writer: Writer, replay: Replay, keep: Callable[[StepScalars], StepScalars]
) -> None:
    """Each batch to the writer (scalars, then the extras of the same steps)."""
    bar = _progress(len(replay.steps))
    try:
        for scalars, extras in replay.batches():
            if scalars:
                writer.write([keep(record) for record in scalars])
                if bar is not None:
                    bar.update(len(scalars))
            if extras:
                writer.write_extras(extras)
        writer.flush()
    finally:
        if bar is not None:
            bar.close()


def _progress(total: int) -> Any:
    """A tqdm bar on stderr for a long replay at a terminal (None otherwise)."""
    if total < PROGRESS_MIN_STEPS or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", file=sys.stderr, mininterval=0.5, leave=False)


class _Target:
    """A writer for the destination, plus what to do once it is closed."""

    writer: Writer
    where = ""

    def __init__(self) -> None:
        self.skipped = 0
        self.notes: list[str] = []

    def keep(self, record: StepScalars) -> StepScalars:
        """The part of a step the destination does not hold yet (all of it by default)."""
        return record

    def done(self) -> None:
        """After the writer closed: move files into place, remove the superseded ones."""

    def abandon(self) -> None:
        """The replay failed part-way: remove what it wrote so far (where it can)."""


class _TensorBoard(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon.writers.tensorboard import TensorBoardWriter

        self.folder = Path(str(where)) / replay.job
        self.run_id = replay.run_id
        self.before = _manifest_files(self.folder)
        # Two new files sorting after every other, each starting with a session START at
        # step 0: TensorBoard takes the first as the session's start and the second as a
        # restart, dropping every event read before it, so what the live writer (or an
        # earlier sync) left in the folder no longer shows.
        opener = TensorBoardWriter(self.folder)
        opener.resume(0, None)
        opener.close()
        writer = TensorBoardWriter(self.folder)
        writer.resume(0, None)
        self.writer = writer
        self.files = [opener.path.name, writer.path.name]
        self.where = str(writer.path)

    def done(self) -> None:
        for name in self.before:
            if name not in self.files:
                with suppress(FileNotFoundError):
                    (self.folder / Path(name).name).unlink()
        manifest = {"run_id": self.run_id, "files": self.files}
        _atomic_write(self.folder / MANIFEST, orjson.dumps(manifest))

    def abandon(self) -> None:
        for name in self.files:  # the earlier sync's set stays, and shows again
            with suppress(FileNotFoundError):
                (self.folder / name).unlink()


class _Csv(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon.writers.csv import CsvWriter

        base = Path(str(where))
        self.folder = base / replay.job
        self.staging = base / f".{replay.job}.trainmon-sync"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.writer = CsvWriter(self.staging)
        self.where = str(self.folder)

    def done(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.staging.iterdir()):
            os.replace(path, self.folder / path.name)
        self.staging.rmdir()

    def abandon(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class _Mlflow(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon import extras
        from trainmon.writers.mlflow import MlflowWriter, check_reachable, mlflow_key

        extras.require("mlflow", "mlflow", "trainmon sync --to mlflow")
        from mlflow.tracking import MlflowClient

        try:  # a server that does not answer: say so now, not after MLflow's retries
            check_reachable(str(where))
        except ConnectionError as exc:
            raise RunError(str(exc)) from None
        self.mlflow_key = mlflow_key
        client = MlflowClient(tracking_uri=where)
        run_id = args.run_id or _tagged_run(client, args.experiment, replay.run_id)
        tags = {RUN_ID_TAG: replay.run_id}
        self.held: dict[str, set[int]] = {}
        if run_id is not None:
            try:
                run = client.get_run(run_id)
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise RunError(
                    f"--run-id {run_id}: no such MLflow run at {where} ({first})"
                ) from None
            self.held = {
                key: {m.step for m in client.get_metric_history(run_id, key)}
                for key in run.data.metrics
            }
            params = set(run.data.params)
            if replay.hparams is not None:  # MLflow params cannot change: send the new ones
                new = {
                    k: v for k, v in replay.hparams.hparams.items() if mlflow_key(k) not in params
                }
                replay.hparams = dataclasses.replace(replay.hparams, hparams=new)
            section = MlflowConfig(enabled=True, tracking_uri=where, run_id=run_id, tags=tags)
        else:
            section = MlflowConfig(
                enabled=True,
                tracking_uri=where,
                experiment=args.experiment,
                run_name=replay.job,
                tags=tags,
            )
        writer = MlflowWriter(section, job=replay.job)
        self.writer = writer
        self.where = f"MLflow run {writer.run_id} ({where})"

    def keep(self, record: StepScalars) -> StepScalars:
        held = self.held
        if not held:
            return record
        key = self.mlflow_key
        values = {
            name: value
            for name, value in record.values.items()
            if record.step not in held.get(key(name), ())
        }
        self.skipped += len(record.values) - len(values)
        return StepScalars(record.step, record.wall_time, values)


def _tagged_run(client: Any, experiment: str | None, run_id: str) -> str | None:
    """The id of the run an earlier sync of this journal made in ``experiment``, if any."""
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
    found = client.get_experiment_by_name(name)
    if found is None:
        return None
    runs = client.search_runs(
        [found.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1
    )
    return str(runs[0].info.run_id) if runs else None


class _Wandb(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon.writers.wandb import WandbWriter

        options: dict[str, Any] = {"project": where} if where else {}
        section = WandbConfig(
            enabled=True,
            name=replay.job,
            id=args.run_id or replay.run_id,
            resume="allow",
            entity=args.entity,
            **options,
        )
        writer = WandbWriter(section, job=replay.job)
        self.writer = writer
        identity = writer.identity()
        shown = identity["run_id"] if identity else "(disabled)"
        self.where = f"W&B run {shown} ({writer.location})"
        self.wandb = writer

    def done(self) -> None:
        writer = self.wandb
        if writer.dropped_records:
            self.notes.append(
                f"{writer.dropped_records} steps W&B already had were left out (same run, resumed)"
            )
        if writer.local_dir and "offline" in Path(writer.local_dir).name:
            self.notes.append(f"offline: upload it with  wandb sync {writer.local_dir}")


_TARGETS: dict[str, Callable[[Replay, str | None, argparse.Namespace], _Target]] = {
    "tensorboard": _TensorBoard,
    "csv": _Csv,
    "mlflow": _Mlflow,
    "wandb": _Wandb,
}


def _manifest_files(folder: Path) -> list[str]:
    """The event files an earlier sync wrote into ``folder`` (none when there is no manifest)."""
    try:
        manifest = orjson.loads((folder / MANIFEST).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return []
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return [str(name) for name in files if isinstance(name, str)] if isinstance(files, list) else []


def _atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
