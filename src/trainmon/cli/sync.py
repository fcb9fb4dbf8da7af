"""``trainmon sync RUN --to BACKEND [WHERE]``: replay a run's journal into a backend after the
fact, through the same writer classes (and so the same layouts) as the live writers.

Every target is idempotent, so a sync can be repeated (after a crash of the sync itself, or
to push what a run logged since):

* ``tensorboard DIR`` writes ``DIR/<job>/`` (``DIR/<name>`` with ``--name``): a new set of
  event files that starts with TensorBoard's restart marker at step 0, so the files the live
  writer of this run left there are superseded (for the readers that honour the marker:
  TensorBoard's Python ones, not its fast data server); the files of an earlier sync of this
  run (listed in ``.trainmon-sync.json``) are removed, whatever the reader.
* ``csv DIR`` writes ``DIR/<job>/`` the same way, each file replacing the earlier sync's.

Both write into a staging folder and move the files in once they are whole, listed in the
manifest first (:mod:`trainmon.cli.sync_places`), and refuse a folder that holds another
run. No target writes into the run's own folder.
* ``mlflow URI`` finds the run it made before by its ``trainmon.journal_run_id`` tag (or
  takes ``--run-id``) and logs only the (metric, step) values that run does not hold yet.
* ``wandb [PROJECT]`` logs to the run whose id is the journal's run id (or ``--run-id``),
  resumed: W&B keeps the steps it already has and takes only later ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from trainmon.cli.replay import Replay, load_replay
from trainmon.cli.sync_places import DestinationTakenError, OwnedFolder
from trainmon.config import MlflowConfig, WandbConfig
from trainmon.core.events import Extra, Histogram, StepScalars
from trainmon.core.writer import Writer
from trainmon.report.guard import refuse_destination_in_run, refuse_output_in_record
from trainmon.report.model import RunError

BACKENDS = ("tensorboard", "mlflow", "wandb", "csv")
#: The MLflow tag (and W&B run id) that ties a synced run to its journal.
RUN_ID_TAG = "trainmon.journal_run_id"
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
    sync_.add_argument(
        "--name",
        help="the run's name at the destination (default: its job name); to write beside "
        "another run of the same name",
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


def _event_process(name: str) -> tuple[str, int] | None:
    """``(host, pid)`` from TensorBoard's file name ``events.out.tfevents.<s>.<host>.<pid>.<n>``."""
    parts = name.split(".tfevents.", 1)[-1].split(".")
    if len(parts) < 4 or not parts[-2].isdigit():
        return None
    return ".".join(parts[1:-2]), int(parts[-2])


def _folder(replay: Replay, where: str | None, args: argparse.Namespace, option: str) -> Path:
    """``DIR/<job>`` (or ``DIR/<--name>``), checked not to be the run's own folder."""
    name = getattr(args, "name", None) or replay.job
    if name != Path(name).name or name in ("", ".", ".."):
        raise RunError(f"--name {name!r}: expected a plain folder name (no '/' or '..')")
    folder = Path(str(where)) / name
    refuse_destination_in_run(folder, replay.journal, option)
    return folder


class _TensorBoard(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon.writers.tensorboard import TensorBoardWriter

        folder = _folder(replay, where, args, "--to tensorboard")
        processes = replay.processes
        self.place = OwnedFolder(
            folder,
            replay.run_id,
            replay.journal,
            counts=lambda name: ".tfevents." in name,
            belongs=lambda name: _event_process(name) in processes,
        )
        # Two new files sorting after every other, each starting with a session START at
        # step 0: TensorBoard takes the first as the session's start and the second as a
        # restart, dropping every event read before it, so what the live writer left in the
        # folder no longer shows.
        opener = TensorBoardWriter(self.place.staging)
        opener.resume(0, None)
        opener.close()
        writer = TensorBoardWriter(self.place.staging)
        writer.resume(0, None)
        self.writer = writer
        self.where = str(folder / writer.path.name)

    def done(self) -> None:
        self.place.commit()

    def abandon(self) -> None:
        self.place.abandon()  # the earlier sync's set stays, and shows again


class _Csv(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon.writers.csv import NAMES_FILE, CsvWriter

        folder = _folder(replay, where, args, "--to csv")
        self.place = OwnedFolder(
            folder,
            replay.run_id,
            replay.journal,
            counts=lambda name: name.endswith(".csv") or name == NAMES_FILE,
        )
        self.writer = CsvWriter(self.place.staging)
        self.where = str(folder)

    def done(self) -> None:
        self.place.commit()

    def abandon(self) -> None:
        self.place.abandon()


class _Mlflow(_Target):
    def __init__(self, replay: Replay, where: str | None, args: argparse.Namespace) -> None:
        super().__init__()
        from trainmon import extras
        from trainmon.writers.mlflow import MlflowWriter, check_reachable, mlflow_key

        extras.require("mlflow", "mlflow", "trainmon sync --to mlflow")
        from mlflow.tracking import MlflowClient

        local = _local_store(str(where))
        if local is not None:  # a store file or folder: never one of the run's own files
            refuse_output_in_record(local, [replay.journal], "--to mlflow")
            refuse_destination_in_run(local, replay.journal, "--to mlflow")
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
            there = run.data.tags.get(RUN_ID_TAG)
            if there is not None and there != replay.run_id:
                raise DestinationTakenError(
                    f"--run-id {run_id}: that MLflow run holds another journal's run (run id "
                    f"{there}; this journal's is {replay.run_id}); nothing was written. Leave "
                    "--run-id out to sync into this journal's own run."
                )
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
                run_name=args.name or replay.job,
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


def _local_store(uri: str) -> str | None:
    """The path of an MLflow store on this machine (``sqlite:///x.db``, ``file:...`` or a
    plain folder), None for a server."""
    for prefix in ("sqlite:///", "file://", "file:"):
        if uri.startswith(prefix):
            return uri.removeprefix(prefix) or None
    return None if "://" in uri else uri


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
            name=args.name or replay.job,
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
