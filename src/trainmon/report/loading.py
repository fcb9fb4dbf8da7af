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
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from trainmon.journal import JOURNAL_FILE
from trainmon.report.model import Run, RunError, Series
from trainmon.report.tfevents import EventFileReader, EventScalars, is_event_file

ALERTS_FILE = "alerts.jsonl"
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_MAX_EVENT_FILES = 10_000


def load_run(path: str | os.PathLike[str], name: str | None = None) -> Run:
    """Read the run at ``path``; :class:`RunError` (saying what was looked for) if none is."""
    target = Path(path)
    journal, note = find_journal(target)
    if journal is not None:
        run = load_journal(journal, name or (target.name if note else None))
        if note:
            run.notes.append(note)
        return run
    if target.is_file():
        if is_event_file(target):
            return load_event_files(target.parent, [target], name, shown_path=target)
        raise RunError(
            f"{target}: not a trainmon journal (*.jsonl) or a TensorBoard event file "
            "(events.out.tfevents.*)"
        )
    events = _event_files(target)
    if events:
        return load_event_files(target, events, name)
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


class _Columns:
    """Scalars records gathered column-wise: consecutive records with the same names form a
    segment whose values are transposed in C (``zip(*rows)``), so a million scalars cost a
    few list operations per record, not per value."""

    def __init__(self) -> None:
        self.raw: dict[str, tuple[list[int], list[Any]]] = {}
        self.names: list[str] = []
        self.steps: list[int] = []
        self.rows: list[tuple[Any, ...]] = []

    def flush(self) -> None:
        if not self.rows:
            return
        raw = self.raw
        for name, column in zip(self.names, zip(*self.rows, strict=True), strict=True):
            found = raw.get(name)
            if found is None:
                raw[name] = (list(self.steps), list(column))
            else:
                found[0].extend(self.steps)
                found[1].extend(column)
        self.steps = []
        self.rows = []


def load_journal(path: Path, name: str | None = None) -> Run:
    """Read a journal in one pass (orjson per line); see :mod:`trainmon.journal` for the schema."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    lines = data.split(b"\n")
    cut_short = False
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    columns = _Columns()
    windows: list[dict[str, Any]] = []
    metas: list[dict[str, Any]] = []
    extras: list[dict[str, Any]] = []
    steps: set[int] = set()
    first: dict[str, Any] | None = None
    latest: dict[str, Any] | None = None
    bad: list[int] = []
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if not line or line.isspace():
            continue
        try:
            record = loads(line)
            kind = record["kind"]
        except (decode_error, TypeError, KeyError, IndexError):
            if number == last or b'"meta"' in lines[number + 1]:
                cut_short = True  # a killed run's last line (then perhaps a restart)
            else:
                bad.append(number + 1)
            continue
        if kind == "scalars":
            try:
                step = record["step"]
                values = record["values"]
                names = list(values)
            except (KeyError, TypeError):
                bad.append(number + 1)
                continue
            if step.__class__ is not int or values.__class__ is not dict:
                bad.append(number + 1)
                continue
            if names != columns.names:
                columns.flush()
                columns.names = names
            columns.steps.append(step)
            columns.rows.append(tuple(values.values()))
            steps.add(step)
            if first is None:
                first = record
            latest = record
        elif kind == "window":
            windows.append(record)
        elif kind == "meta":
            metas.append(record)
        elif kind in _EXTRA_KINDS:
            extras.append(record)
    columns.flush()
    meta = metas[-1] if metas else {}
    job = meta.get("job")
    run = Run(
        name=name or (job if isinstance(job, str) and job else path.parent.name or path.stem),
        path=path,
        source="trainmon journal",
        windows=windows,
        meta=meta,
        start_time=_time_of(first),
        end_time=_time_of(latest),
        step_count=len(steps),
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
    if len(metas) > 1:
        run.notes.append(
            f"the journal holds {len(metas)} starts (restarts); a step logged twice keeps "
            "its latest value"
        )
    run.series = _finish(columns.raw, run.notes)
    run.alerts = load_alerts(path.parent, run.notes)
    _add_extras(run, extras)
    return run


_EXTRA_KINDS = frozenset({"hparams", "histogram", "text"})


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
                record[key] = _number(record.get(key))
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
    folder: Path, files: list[Path], name: str | None = None, shown_path: Path | None = None
) -> Run:
    """Read the scalars of ``files`` (all under ``folder``) as one run.

    Files in one folder are one run, read in name (time) order. When several folders hold event
    files, a tag found in more than one is prefixed with its folder's path so none hides another.
    """
    by_dir: dict[Path, list[Path]] = {}
    for file in files:
        by_dir.setdefault(file.parent, []).append(file)
    results: dict[Path, EventScalars] = {}
    for directory, group in by_dir.items():
        reader = EventFileReader()
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
    run.series = _finish(raw, run.notes)
    run.step_count = _distinct_steps(run.series)
    run.alerts = load_alerts(folder, run.notes)
    return run


# ---- shared ----------------------------------------------------------------------------------


def _finish(raw: dict[str, tuple[list[int], list[Any]]], notes: list[str]) -> dict[str, Series]:
    """Series with float values and strictly increasing steps (a repeated step keeps its last)."""
    series: dict[str, Series] = {}
    dropped = 0
    for name in raw:
        steps, values = raw[name]
        kinds = set(map(type, values))
        if not kinds <= {float}:
            if kinds <= {float, int}:
                values = list(map(float, values))
            else:
                kept = [(s, _number(v)) for s, v in zip(steps, values, strict=True)]
                dropped += sum(1 for _, v in kept if v is None)
                steps = [s for s, v in kept if v is not None]
                values = [v for _, v in kept if v is not None]
        if not all(map(operator.lt, steps, islice(steps, 1, None))):
            latest = dict(zip(steps, values, strict=True))
            steps = sorted(latest)
            values = [latest[s] for s in steps]
        if steps:
            unit = "samples" if "/samples/" in name.lower() else "step"
            series[name] = Series(name, steps, values, unit)
    if dropped:
        notes.append(f"skipped {dropped} value(s) that are not numbers")
    return series


def _distinct_steps(series: dict[str, Series]) -> int:
    """How many steps logged something (cheap when every metric has the same steps)."""
    lists = [s.steps for s in series.values()]
    if not lists:
        return 0
    if all(steps == lists[0] for steps in lists[1:]):
        return len(lists[0])
    return len(set().union(*lists))


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    return None


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
