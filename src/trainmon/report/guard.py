"""What a run's record is made of, so that no tool that reads a run writes over or into it.

``report -o`` and ``sync --to`` check their output here before they touch anything: a file
that a reader of the run reads (the journal, event files, CSVs, alerts, hang records, a sync
manifest) is refused with :class:`RecordInUseError`, whose message names the file.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path

from trainmon.errors import TrainmonError

#: Names of the files a run's readers read (``summary``, ``sync``, ``goodput``, ``hang``...).
RECORD_PATTERNS = (
    "*.jsonl",
    "*.tfevents.*",
    "*.csv",
    "hang-rank*.json",
    ".trainmon-sync.json",
)


class RecordInUseError(TrainmonError):
    """An output would write over, or into, a file of a run's record (``trainmon`` exits 2)."""


def is_record_name(name: str) -> bool:
    """Whether a file of this name is part of a run's record (see :data:`RECORD_PATTERNS`)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in RECORD_PATTERNS)


def run_folder(path: str | os.PathLike[str]) -> Path:
    """The folder a run lives in: ``path`` itself, or the folder of a run's file."""
    path = Path(path).resolve()
    return path.parent if path.is_file() else path


def refuse_output_in_record(
    output: str | os.PathLike[str], runs: Iterable[str | os.PathLike[str]], option: str
) -> None:
    """:class:`RecordInUseError` when ``output`` (through any symlink) is a record file of one
    of ``runs`` or would become one (a record's name inside a run's folder); nothing is
    touched either way."""
    target = Path(output).resolve()
    for run in runs:
        folder = run_folder(run)
        inside = target == folder or folder in target.parents
        if target == Path(run).resolve() or (inside and is_record_name(target.name)):
            raise RecordInUseError(
                f"{option} {output}: that is {target}, part of the record of the run at "
                f"{run} (its journal, event files, CSVs or hang records are read from "
                "there); nothing was written. Choose a path outside the run's files, e.g. "
                f"{folder / 'report.html'}"
            )


def refuse_destination_in_run(
    destination: str | os.PathLike[str], journal: str | os.PathLike[str], option: str
) -> None:
    """:class:`RecordInUseError` when a sync's destination folder is the run's own folder or
    holds it: a sync writes beside a run, never into it."""
    target = Path(destination).resolve()
    folder = run_folder(journal)
    if target == folder or target in folder.parents:
        raise RecordInUseError(
            f"{option}: the destination {target} is the run's own folder (or holds it: "
            f"{journal}); a sync writes beside a run, never into its record. Pass another "
            "folder."
        )
