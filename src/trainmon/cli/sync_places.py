"""Where a file-based sync (TensorBoard, CSV) writes: a folder it owns for one run, and nothing
else.

A sync records what it wrote in the destination's manifest (``.trainmon-sync.json``: the
journal's run id and its files) and, before it moves new files in, the files it is about to
move (``pending``). So it removes or replaces only files its manifest lists for the same run,
and a sync killed at any moment leaves nothing a rerun cannot find: files are written in a
staging folder beside the destination (removed by the next sync), then listed, then moved.
A destination that holds another run (another run id in its manifest, or files no sync of
this run wrote) is refused with :class:`DestinationTakenError`, which says what is there and
how to write beside it (``--name``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from trainmon.errors import TrainmonError

MANIFEST = ".trainmon-sync.json"


class DestinationTakenError(TrainmonError):
    """The destination holds another run's files (``trainmon sync`` exits 2)."""


@dataclass
class Manifest:
    """What the syncs of one run wrote into a destination folder."""

    run_id: str | None = None
    journal: str | None = None
    files: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def owned(self) -> set[str]:
        """Every file a sync of :attr:`run_id` wrote or was moving in."""
        return {*self.files, *self.pending}


def read_manifest(folder: Path) -> Manifest:
    """The manifest of ``folder`` (an empty one when there is none or it is unreadable)."""
    try:
        found = orjson.loads((folder / MANIFEST).read_bytes())
    except (FileNotFoundError, NotADirectoryError, orjson.JSONDecodeError):
        return Manifest()
    if not isinstance(found, dict):
        return Manifest()

    def names(key: str) -> list[str]:
        listed = found.get(key)
        return (
            [Path(n).name for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
        )

    run_id, journal = found.get("run_id"), found.get("journal")
    return Manifest(
        run_id=run_id if isinstance(run_id, str) else None,
        journal=journal if isinstance(journal, str) else None,
        files=names("files"),
        pending=names("pending"),
    )


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Replace ``folder``'s manifest atomically (a temporary file renamed over it)."""
    data = {
        "run_id": manifest.run_id,
        "journal": manifest.journal,
        "files": manifest.files,
        "pending": manifest.pending,
    }
    temporary = folder / (MANIFEST + ".tmp")
    temporary.write_bytes(orjson.dumps(data))
    os.replace(temporary, folder / MANIFEST)


class OwnedFolder:
    """A destination folder for one run: checked at construction, filled by :meth:`commit`.

    ``belongs(name)`` says whether a file the manifest does not list is this run's anyway (the
    live TensorBoard files of one of the journal's own processes): such files are kept, never
    removed or replaced. ``counts(name)`` picks the files the check looks at.
    """

    def __init__(
        self,
        folder: Path,
        run_id: str,
        journal: Path,
        *,
        counts: Callable[[str], bool],
        belongs: Callable[[str], bool] = lambda name: False,
    ) -> None:
        self.folder = folder
        self.run_id = run_id
        self.journal = journal
        self.manifest = read_manifest(folder)
        self.staging = folder.parent / f".{folder.name}.trainmon-sync"
        there = self.manifest.run_id
        if there is not None and there != run_id:
            raise DestinationTakenError(
                f"{folder} holds another run, synced there from {self.manifest.journal or '?'} "
                f"(run id {there}; this journal's is {run_id}); nothing was written. Pass "
                f"--name NAME to write this run beside it ({folder.parent}/NAME)."
            )
        foreign = sorted(
            name
            for name in _names(folder)
            if counts(name) and name not in self.manifest.owned and not belongs(name)
        )
        if foreign:
            listed = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise DestinationTakenError(
                f"{folder} holds {len(foreign)} file(s) no sync of this run wrote ({listed}): "
                "another run's, or a live writer's; nothing was written. Pass --name NAME to "
                f"write this run beside them ({folder.parent}/NAME), or remove them first."
            )
        shutil.rmtree(self.staging, ignore_errors=True)  # what a killed sync left half-written
        self.staging.mkdir(parents=True)

    def commit(self) -> list[str]:
        """Move the staged files in, then remove the files of earlier syncs they replace.

        The manifest lists the incoming files before any is moved, so a kill at any moment
        leaves every file of this run listed: the next sync removes what is not its own.
        """
        new = sorted(p.name for p in self.staging.iterdir())
        old = self.manifest.owned
        self.folder.mkdir(parents=True, exist_ok=True)
        pending = Manifest(self.run_id, str(self.journal), sorted(old - set(new)), new)
        write_manifest(self.folder, pending)
        for name in new:
            os.replace(self.staging / name, self.folder / name)
        self.staging.rmdir()
        for name in old - set(new):
            with suppress(FileNotFoundError):
                (self.folder / name).unlink()
        write_manifest(self.folder, Manifest(self.run_id, str(self.journal), new, []))
        return new

    def abandon(self) -> None:
        """The replay failed part-way: drop the staged files; the folder is as it was."""
        shutil.rmtree(self.staging, ignore_errors=True)


def _names(folder: Path) -> Iterable[str]:
    try:
        return [p.name for p in folder.iterdir() if p.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []
