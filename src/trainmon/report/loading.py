"""Finding and reading a run: trainmon's JSONL journal, or a folder of TensorBoard event files.

``load_run(path)`` accepts what a user is likely to point at: a ``metrics.jsonl`` file, the
folder holding it (also the demo's output folder, or ``output_path`` with one job inside), a
per-rank output folder (``rank-<r>/``), a folder of event files written by DeepSpeed, torch's
``SummaryWriter`` or trainmon, or one event file. Reading is lenient: a line or record cut
short by a killed run ends the data, a corrupt line is skipped, and each such thing is noted in
:attr:`Run.notes` rather than raised.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from trainmon.core.alert import ALERTS_FILE
from trainmon.journal import JOURNAL_FILE, ClockMend, Timeline, journal_lines, orphaned
from trainmon.report.agree import distinct_steps, settle
from trainmon.report.columns import Columns, FloatColumn, WindowRecords, number_or_none
from trainmon.report.csvfiles import is_metric_csv, read_metric_csv
from trainmon.report.hparams import read_hparams
from trainmon.report.model import Run, RunError, Series
from trainmon.report.tfevents import EventFileReader, EventScalars, is_event_file
from trainmon.report.wallclock import StepClock

_MAX_EVENT_FILES = 10_000


def load_run(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    verify: bool = True,
    clock: bool = True,
) -> Run:
    """Read the run at ``path``; :class:`RunError` (saying what was looked for) if none is.

    ``verify=False`` skips the CRC checks of TensorBoard event files (the CLI's ``--fast``);
    ``clock=False`` keeps no time per step of a journal (:attr:`Run.clock`: the report's
    wall-time axis; ``summary`` and ``compare`` do without, 16 bytes a step less).
    """
    return settle(_load_run(Path(path), name, verify=verify, clock=clock))


def _load_run(target: Path, name: str | None, *, verify: bool, clock: bool = True) -> Run:
    journal, note = find_journal(target)
    if journal is not None:
        run = load_journal(journal, name or (target.name if note else None), clock=clock)
        if note:
            run.notes.append(note)
        return run
    if target.is_file():
        if is_event_file(target):
            return load_event_files(target.parent, [target], name, shown_path=target, verify=verify)
        raise RunError(
            f"{target}: not a trainmon journal (*.jsonl) or a TensorBoard event file "
            "(events.out.tfevents.*)"
        )
    events = _event_files(target)
    if events:
        return load_event_files(target, events, name, verify=verify)
    tables = sorted(p for p in target.glob("*.csv") if is_metric_csv(p))
    if tables:
        return load_csv_files(target, tables, name)
    raise RunError(
        f"{target}: no trainmon run here: expected {JOURNAL_FILE} (trainmon's journal, written "
        "when the config's jsonl section is enabled) or TensorBoard event files "
        "(events.out.tfevents.*)"
    )


def find_journal(target: Path) -> tuple[Path | None, str]:
    """The journal a path means (and a note when it picked one of several rank folders).

    ``(None, "")`` when ``target`` is a folder or file without one; :class:`RunError` when it
    does not exist or holds several runs.
    """
    if not target.exists():
        raise RunError(f"{target}: no such file or folder")
    if target.is_file():
        return (target, "") if target.name.endswith(".jsonl") else (None, "")
    journal = target / JOURNAL_FILE
    if journal.is_file():
        return journal, ""
    ranks = sorted(target.glob(f"rank-*/{JOURNAL_FILE}"), key=_rank_number)
    if ranks:
        note = (
            f"per-rank output: showing {ranks[0].parent.name} of {len(ranks)} ranks "
            f"(pass {ranks[1].parent} for another)"
            if len(ranks) > 1
            else ""
        )
        return ranks[0], note
    if any(is_event_file(p) for p in target.iterdir()):
        return None, ""
    nested = sorted(target.glob(f"*/{JOURNAL_FILE}"))
    if len(nested) == 1:
        return nested[0], ""
    if nested:
        listed = ", ".join(str(p.parent) for p in nested[:5])
        raise RunError(f"{target}: holds {len(nested)} runs ({listed}); pass one of them")
    return None, ""


def _rank_number(path: Path) -> tuple[int, str]:
    suffix = path.parent.name.removeprefix("rank-")
    return (int(suffix) if suffix.isdigit() else 1 << 30, suffix)


def _event_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found.extend(Path(root) / f for f in sorted(files) if ".tfevents." in f)
        if len(found) > _MAX_EVENT_FILES:
            break
    return found


# ---- the JSONL journal ---------------------------------------------------------------------


def load_journal(path: Path, name: str | None = None, *, clock: bool = True) -> Run:
    """Read a journal in one streaming pass (orjson per line, a few MB in memory at a time);
    see :mod:`trainmon.journal` for the schema."""
    try:
        open(path, "rb").close()
    except OSError as exc:
        raise RunError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    reader = JournalReader(path, name, clock=clock)
    reader.feed(journal_lines(path))
    return reader.run()


class JournalReader:
    """:func:`load_journal`'s pass over a journal, resumable: :meth:`feed` lines as they come
    (``trainmon report --serve`` feeds the lines appended since its last read), :meth:`run`
    gives the :class:`Run` read so far at any point, and feeding goes on after it.

    The surviving timeline (:class:`~trainmon.journal.Timeline`) is the file's when the reader
    is made: lines fed later must belong to its last attempt (a new ``meta`` or ``resume`` line
    changes which records survive, so a reader of a growing file reads it again from its start).
    Values are kept as :class:`~trainmon.report.columns.Columns` do, never per-point objects.
    """

    def __init__(self, path: Path, name: str | None = None, *, clock: bool = True) -> None:
        self.path = path
        self.name = name
        self.columns = Columns()
        self.windows = WindowRecords(path)
        self.metas: list[dict[str, Any]] = []
        self.extras: list[dict[str, Any]] = []
        self.step_count = 0
        self.seen_max = -(1 << 63)
        self.steps: set[int] | None = None  # only needed once steps stop rising
        self.first: dict[str, Any] | None = None
        self.latest: dict[str, Any] | None = None
        self.bad: list[int] = []
        self.pending: int | None = None  # an unreadable line: cut short if a meta follows
        self.cut_short = False
        self.lines = 0
        self.cutoffs = Timeline.from_file(path)
        self.clock = ClockMend()
        self.times = StepClock() if clock else None
        """When each step was first logged (the report's wall-time axis), 16 bytes a step;
        None when not asked for."""
        self.orphans = 0

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> None:
        """Read ``(byte offset, line)`` pairs, the lines that follow those already fed."""
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        columns = self.columns
        windows = self.windows
        metas = self.metas
        extras = self.extras
        step_count = self.step_count
        seen_max = self.seen_max
        steps = self.steps
        first = self.first
        latest = self.latest
        bad = self.bad
        pending = self.pending
        cutoffs = self.cutoffs
        clock = self.clock
        note_time = self.times.add if self.times is not None else None
        orphans = self.orphans
        number = self.lines
        try:
            for number, (offset, line) in enumerate(lines, start=self.lines + 1):
                if not line or line.isspace():
                    continue
                if pending is not None:
                    if b'"meta"' in line:
                        self.cut_short = True  # a killed run's last line, then a restart
                    else:
                        bad.append(pending)
                    pending = None
                try:
                    record = loads(line)
                    kind = record["kind"]
                    if kind in _CLOCKED:
                        clock.mend(record)
                    if cutoffs and orphaned(record, cutoffs.at(number - 1)):
                        orphans += 1
                        continue
                except (decode_error, TypeError, KeyError, IndexError):
                    pending = number
                    continue
                if kind == "scalars":
                    try:
                        step = record["step"]
                        values = record["values"]
                    except (KeyError, TypeError):
                        bad.append(number)
                        continue
                    if step.__class__ is not int or values.__class__ is not dict:
                        bad.append(number)
                        continue
                    columns.add(list(values), step, tuple(values.values()))
                    if note_time is not None:
                        when = record.get("time")
                        if when.__class__ is float or when.__class__ is int:
                            note_time(step, when)
                    if steps is None:
                        if step > seen_max:
                            seen_max = step
                            step_count += 1
                        elif step != seen_max:
                            steps = set(columns.steps)
                            for found in columns.raw.values():
                                steps.update(found[0])
                    if steps is not None:
                        steps.add(step)
                    if first is None:
                        first = record
                    latest = record
                elif kind == "window":
                    windows.offsets.append(offset)
                elif kind == "meta":
                    metas.append(record)
                elif kind in _EXTRA_KINDS:
                    extras.append(record)
        finally:
            self.lines = number
            self.step_count = step_count
            self.seen_max = seen_max
            self.steps = steps
            self.first = first
            self.latest = latest
            self.pending = pending
            self.orphans = orphans

    def run(self, unfinished: bytes = b"") -> Run:
        """The run read so far. ``unfinished``: a last line still being written (no newline
        yet), judged as :func:`load_journal` judges a file's last line; it is not kept."""
        pending, bad, cut_short = self.pending, self.bad, self.cut_short
        if unfinished.strip() and _unreadable(unfinished):
            if pending is not None:
                if b'"meta"' in unfinished:
                    cut_short = True
                else:
                    bad = [*bad, pending]
            pending = self.lines + 1
        if pending is not None:
            cut_short = True
        path = self.path
        columns = self.columns
        columns.flush()
        meta = self.metas[-1] if self.metas else {}
        job = meta.get("job")
        name = self.name
        run = Run(
            name=name or (job if isinstance(job, str) and job else path.parent.name or path.stem),
            path=path,
            source="trainmon journal",
            windows=self.windows,
            meta=meta,
            start_time=_time_of(self.first),
            end_time=_time_of(self.latest),
            step_count=len(self.steps) if self.steps is not None else self.step_count,
            clock=self.times.settle() if self.times else None,
        )
        if cut_short:
            run.notes.append(
                "a line is cut short (the run was killed, or is still writing); "
                "read every complete line"
            )
        if bad:
            run.notes.append(
                f"skipped {len(bad)} unreadable line(s) (first: line {bad[0]} of {path.name})"
            )
        if self.clock.jumps:
            run.notes.append(self.clock.describe())
        if self.orphans:
            run.notes.append(
                f"left out {self.orphans} record(s) of an earlier attempt: a later attempt "
                "started again at or before their step (resumed or restarted), and its values "
                "are shown"
            )
        if len(self.metas) > 1:
            run.notes.append(
                f"the journal holds {len(self.metas)} attempts (restarts into its folder)"
            )
        if columns.dropped:
            run.notes.append(f"skipped {columns.dropped} value(s) that are not numbers")
        run.series = _finish(dict(columns.raw), run.notes)
        run.alerts = load_alerts(path.parent, run.notes)
        _add_extras(run, self.extras)
        return run


def _unreadable(line: bytes) -> bool:
    """Whether :class:`JournalReader` would set ``line`` aside as unreadable."""
    try:
        orjson.loads(line)["kind"]
    except (orjson.JSONDecodeError, TypeError, KeyError, IndexError):
        return True
    return False


_EXTRA_KINDS = frozenset({"hparams", "histogram", "text"})
#: The kinds whose times the clock mend needs to see (cheap: no window or extra lines).
_CLOCKED = frozenset({"scalars", "meta", "heartbeat"})


def _add_extras(run: Run, records: list[dict[str, Any]]) -> None:
    """Hyper-parameters, histograms and text of the journal (see :mod:`trainmon.journal`)."""
    bad = 0
    for record in records:
        kind = record["kind"]
        if kind == "hparams":
            hparams = record.get("hparams")
            if isinstance(hparams, dict):
                run.hparams.update(hparams)
            else:
                bad += 1
            continue
        name, step = record.get("name"), record.get("step")
        if not isinstance(name, str) or step.__class__ is not int:
            bad += 1
        elif kind == "text":
            if isinstance(record.get("text"), str):
                run.texts.append(record)
            else:
                bad += 1
        elif isinstance(record.get("counts"), list) and isinstance(record.get("edges"), list):
            for key in ("min", "max", "sum", "sum_squares"):
                record[key] = number_or_none(record.get(key))
            run.histograms.setdefault(name, []).append(record)
        else:
            bad += 1
    if bad:
        run.notes.append(f"skipped {bad} unreadable hparams/histogram/text record(s)")


def _time_of(record: dict[str, Any] | None) -> float | None:
    when = record.get("time") if record is not None else None
    return float(when) if isinstance(when, (int, float)) and math.isfinite(when) else None


# ---- TensorBoard event files ---------------------------------------------------------------


def load_event_files(
    folder: Path,
    files: list[Path],
    name: str | None = None,
    shown_path: Path | None = None,
    *,
    verify: bool = True,
) -> Run:
    """Read the scalars and hyper-parameters of ``files`` (all under ``folder``) as one run.

    Files in one folder are one run, read in name (time) order. When several folders hold event
    files, a tag found in more than one is prefixed with its folder's path so none hides another.
    """
    by_dir: dict[Path, list[Path]] = {}
    for file in files:
        by_dir.setdefault(file.parent, []).append(file)
    results: dict[Path, EventScalars] = {}
    for directory, group in by_dir.items():
        reader = EventFileReader(verify=verify)
        for file in group:
            try:
                reader.read(file)
            except OSError as exc:
                reader.result.problems.append(f"{file.name}: cannot be read: {exc}")
        results[directory] = reader.result
    notes: list[str] = []
    counts: dict[str, int] = {}
    for result in results.values():
        for tag in result.tags:
            counts[tag] = counts.get(tag, 0) + 1
    raw: dict[str, tuple[list[int], list[Any]]] = {}
    times: list[float] = []
    skipped: dict[str, int] = {}
    for directory, result in results.items():
        relative = directory.relative_to(folder).as_posix() if directory != folder else ""
        for tag, pair in result.tags.items():
            key = f"{relative or '.'}/{tag}" if counts[tag] > 1 else tag
            if key in raw:  # same tag in the same folder name: append (rare)
                raw[key][0].extend(pair[0])
                raw[key][1].extend(pair[1])
            else:
                raw[key] = pair
        times += [t for t in (result.first_time, result.last_time) if t is not None]
        for tag, n in result.skipped.items():
            skipped[tag] = skipped.get(tag, 0) + n
        notes += [f"{relative + '/' if relative else ''}{p}" for p in result.problems]
    if len(results) > 1:
        shared = sorted(t for t, n in counts.items() if n > 1)
        notes.append(
            f"{len(results)} folders hold event files; "
            + (
                f"tags found in several ({', '.join(shared[:5])}) are prefixed with their "
                "folder — pass one folder for one run's summary"
                if shared
                else "read together as one run"
            )
        )
    if skipped:
        tags = ", ".join(sorted(skipped)[:5]) + (", ..." if len(skipped) > 5 else "")
        notes.append(
            f"ignored {sum(skipped.values())} non-scalar summaries (images, histograms, text, "
            f"...) in {len(skipped)} tag(s): {tags}"
        )
    run = Run(
        name=name or folder.name or str(folder),
        path=shown_path or folder,
        source="TensorBoard events",
        start_time=min(times) if times else None,
        end_time=max(times) if times else None,
        notes=notes,
    )
    run.series = _finish(dict(raw), run.notes)
    run.step_count = distinct_steps(run.series)
    run.clock = _event_clock([r.clock for r in results.values()], run)
    run.alerts = load_alerts(folder, run.notes)
    run.hparams = read_hparams((c for r in results.values() for c in r.hparams_data), notes)
    return run


def _event_clock(clocks: list[StepClock], run: Run) -> StepClock | None:
    """The event files' step times as one clock, on the x every series of the run shares
    (None when steps and samples are mixed: one clock cannot time both)."""
    units = {s.x_unit for s in run.series.values()}
    if len(units) != 1 or not any(len(c) for c in clocks):
        return None
    clock = clocks[0] if len(clocks) == 1 else StepClock()
    if len(clocks) > 1:
        for other in clocks:
            clock.extend(zip(other.steps, other.times, strict=True))
    clock.unit = units.pop()
    return clock.settle()


# ---- DeepSpeed's csv_monitor layout ---------------------------------------------------------


def load_csv_files(folder: Path, files: list[Path], name: str | None = None) -> Run:
    """One run from a folder of ``step,<name>`` CSV files; a step repeated by a restart keeps
    its last row (the resumed run's value)."""
    raw: dict[str, tuple[Sequence[int], Sequence[Any]]] = {}
    skipped = 0
    for file in files:
        metric, steps, values, bad = read_metric_csv(file)
        skipped += bad
        raw[metric] = (steps, values)
    run = Run(name=name or folder.name or str(folder), path=folder, source="CSV files")
    if skipped:
        run.notes.append(f"skipped {skipped} unreadable CSV row(s)")
    run.series = _finish(raw, run.notes)
    run.step_count = distinct_steps(run.series)
    return run


# ---- shared ----------------------------------------------------------------------------------


def _finish(
    raw: dict[str, tuple[Sequence[int], Sequence[Any]]], notes: list[str]
) -> dict[str, Series]:
    """Series with float values and strictly increasing steps (a repeated step keeps its last).

    Compact columns (the journal's) stay compact, and a steps column shared by several
    metrics stays shared.
    """
    series: dict[str, Series] = {}
    dropped = 0
    rising: dict[int, bool] = {}
    for name in raw:
        steps, values = raw[name]
        if not isinstance(values, FloatColumn):
            kinds = set(map(type, values))
            if not kinds <= {float}:
                if kinds <= {float, int}:
                    values = list(map(float, values))
                else:
                    kept = [(s, number_or_none(v)) for s, v in zip(steps, values, strict=True)]
                    dropped += sum(1 for _, v in kept if v is None)
                    steps = [s for s, v in kept if v is not None]
                    values = [v for _, v in kept if v is not None]
        ordered = rising.get(id(steps))
        if ordered is None:
            ordered = all(map(operator.lt, steps, islice(steps, 1, None)))
            rising[id(steps)] = ordered
        if not ordered:
            latest = dict(zip(steps, values, strict=True))
            steps = sorted(latest)
            values = [latest[s] for s in steps]
        if steps:
            unit = "samples" if "/samples/" in name.lower() else "step"
            series[name] = Series(name, steps, values, unit)
    if dropped:
        notes.append(f"skipped {dropped} value(s) that are not numbers")
    return series


def load_alerts(folder: Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The lines of ``<folder>/alerts.jsonl`` (``Alert.as_dict()``); [] when there is none."""
    path = folder / ALERTS_FILE
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return parse_alert_lines(data.split(b"\n"), notes, path.name)


def parse_alert_lines(
    lines: Iterable[bytes], notes: list[str] | None = None, where: str = ALERTS_FILE
) -> list[dict[str, Any]]:
    """Alerts from JSON lines; a line that is not an alert object is skipped (and noted)."""
    alerts: list[dict[str, Any]] = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("rule"), str):
            alerts.append(record)
        else:
            bad += 1
    if bad and notes is not None:
        notes.append(f"skipped {bad} unreadable line(s) of {where}")
    return alerts


def alert_step(alert: dict[str, Any]) -> int | None:
    """An alert's step, when it has a usable one."""
    step = alert.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
