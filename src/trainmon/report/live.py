"""The runs of a live report (``trainmon report --serve``), kept up to date as they are written.

A trainmon journal is read incrementally: its byte offset is kept, and each look feeds the
complete lines appended since the last one to the same :class:`JournalReader` that
:func:`~trainmon.report.loading.load_journal` uses (a line still being written waits for its
newline), so a look costs the new lines, and the values stay in compact columns. The journal
is read again from its start when it shrinks or is replaced, and when a new attempt appears (a
``meta`` or ``resume`` line, or the first step of an attempt that had none): a restart changes
which earlier records survive. A TensorBoard or CSV folder is shown as read at the start.

:class:`LiveRuns` numbers each state of its runs (``version``) and remembers, for the last few,
how long each series was, so a page that holds version ``v`` is sent only the points logged
since (:meth:`LiveRuns.updates`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from trainmon.core.alert import ALERTS_FILE
from trainmon.report.agree import settle
from trainmon.report.charts import PALETTE, SLOWEST_RANK, plan_charts
from trainmon.report.downsample import DEFAULT_BUCKETS, minmax_buckets, nonfinite_steps
from trainmon.report.html import MAX_CHARTED_RUNS, live_sections
from trainmon.report.loading import JournalReader, find_journal, load_run
from trainmon.report.marks import alert_marks, run_entries
from trainmon.report.model import (
    BREAKDOWN,
    BREAKDOWN_FALLBACK,
    STEP_TIME,
    Run,
    Series,
    cross_rank_split,
    role,
)
from trainmon.report.summary import RunSummary, summarize

_CHUNK = 1 << 20
_META = b'"meta"'
_RESUME = b'"resume"'
_SCALARS = b'"scalars"'
#: Versions whose series lengths are remembered (a page further behind gets everything again).
HISTORY = 16


class LiveRun:
    """One run of a live report: a trainmon journal read incrementally, anything else once."""

    def __init__(self, target: str | os.PathLike[str], name: str | None, *, verify: bool) -> None:
        self.target = Path(target)
        self.journal, self.note = find_journal(self.target)
        self.name = name or (self.target.name if self.note else None)
        self.verify = verify
        self.epoch = 0
        """Counts full reads: the points of two epochs do not continue one another."""
        self.offset = 0
        self.unfinished = b""
        self.identity: tuple[int, int] | None = None
        self.awaiting = False
        """A later attempt has begun and has not logged a step yet (its first one is a mark)."""
        self.alerts_seen: tuple[int, int] | None = None
        self.static: Run | None = None
        self.reader: JournalReader | None = None
        if self.journal is None:
            self.static = load_run(self.target, name, verify=verify)
        else:
            self._read_all()

    # -- reading ------------------------------------------------------------------------------

    def _read_all(self) -> None:
        """Read the journal from its start (up to its size now: later lines come next time)."""
        assert self.journal is not None
        with open(self.journal, "rb") as f:
            info = os.fstat(f.fileno())
            reader = JournalReader(self.journal, self.name)  # its timeline covers the size read
            self.offset, self.unfinished, self.awaiting = 0, b"", False
            self.identity = None  # until the read is done
            reader.feed(self._watched(self._lines(f, info.st_size)))
        self.identity = (info.st_dev, info.st_ino)
        self.reader = reader
        self.epoch += 1

    def _lines(self, f: IO[bytes], size: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of the complete lines from :attr:`offset` up to ``size``;
        :attr:`offset` follows the lines given, :attr:`unfinished` gets what follows them."""
        f.seek(self.offset)
        offset, rest, left = self.offset, b"", size - self.offset
        while left > 0:
            data = f.read(min(_CHUNK, left))
            if not data:
                break
            left -= len(data)
            pieces = (rest + data).split(b"\n")
            rest = pieces.pop()
            for line in pieces:
                yield offset, line
                offset += len(line) + 1
            self.offset = offset
        self.unfinished = rest

    def _watched(self, lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
        """``lines``, noting whether a later attempt is still waiting for its first step."""
        metas = 0
        for item in lines:
            line = item[1]
            if _META in line:
                metas += 1
                self.awaiting = metas > 1
            elif self.awaiting and (_SCALARS in line or _RESUME in line):
                self.awaiting = False
            yield item

    def refresh(self) -> bool:
        """Read what was appended since the last look; True when the run changed."""
        if self.journal is None:
            return False
        try:
            return self._refresh()
        except BaseException:
            self.identity = None  # read in part: read it all again next time
            raise

    def _refresh(self) -> bool:
        changed = self._alerts_changed()
        assert self.journal is not None
        try:
            with open(self.journal, "rb") as f:
                grew = self._append(f)
        except FileNotFoundError:
            return changed  # gone for now (being replaced): keep what was read
        if grew is None:
            self._read_all()
            return True
        return grew or changed

    def _append(self, f: IO[bytes]) -> bool | None:
        """Feed the complete lines appended since the last look: True when there were some
        (or the unfinished line changed), None when the journal must be read again."""
        assert self.reader is not None
        info = os.fstat(f.fileno())
        if (info.st_dev, info.st_ino) != self.identity or info.st_size < self.offset:
            return None  # replaced or cut: read it again
        if info.st_size == self.offset + len(self.unfinished):
            return False
        before = (self.offset, self.unfinished)
        batch: list[tuple[int, bytes]] = []
        for item in self._lines(f, info.st_size):
            batch.append(item)
            if len(batch) >= 4096:
                if self._restarts(batch):
                    return None
                self.reader.feed(batch)
                batch = []
        if self._restarts(batch):
            return None
        self.reader.feed(batch)
        return (self.offset, self.unfinished) != before

    def _restarts(self, batch: list[tuple[int, bytes]]) -> bool:
        """Whether ``batch`` may start an attempt or give one its first step (read it all)."""
        if self.awaiting:
            return any(_SCALARS in line or _RESUME in line or _META in line for _, line in batch)
        return any(_META in line or _RESUME in line for _, line in batch)

    def _alerts_changed(self) -> bool:
        assert self.journal is not None
        try:
            info = os.stat(self.journal.parent / ALERTS_FILE)
            seen: tuple[int, int] | None = (info.st_size, info.st_mtime_ns)
        except OSError:
            seen = None
        changed = seen != self.alerts_seen
        self.alerts_seen = seen
        return changed

    def snapshot(self) -> Run:
        """The run as read so far (as :func:`~trainmon.report.loading.load_run` reads it)."""
        if self.static is not None:
            return self.static
        assert self.reader is not None
        self.reader.name = self.name
        run = self.reader.run(self.unfinished)
        if self.note:
            run.notes.append(self.note)
        return settle(run)


# ---- the served state -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Marks:
    """What a version held: each run's epoch and alert count, each series' length and last
    step (so the points after it are the ones a page at that version lacks)."""

    epochs: tuple[int, ...]
    alerts: tuple[int, ...]
    series: dict[tuple[int, str], tuple[int, int]]


class LiveRuns:
    """The runs a live report shows, their current version and what changed between versions.

    Not thread-safe: the server holds a lock around each call (the runs' columns grow in place).
    """

    def __init__(
        self,
        targets: Sequence[str],
        names: Sequence[str | None],
        *,
        buckets: int = DEFAULT_BUCKETS,
        verify: bool = True,
        label: Callable[[list[Run]], None] | None = None,
    ) -> None:
        self.buckets = buckets
        self.live = [LiveRun(t, n, verify=verify) for t, n in zip(targets, names, strict=True)]
        for live in self.live:
            live.refresh()  # notes the alerts file as seen
        self.runs = [live.snapshot() for live in self.live]
        for run in self.runs:
            run.require_metrics()
        if label is not None:
            label(self.runs)
        for live, run in zip(self.live, self.runs, strict=True):
            live.name = run.name  # the names shown stay as first given
        # counted from the clock, so a page left open across a restart of the server never
        # takes the new server's version for the one it shows
        self.version = int(time.time() * 1000)
        self.history: dict[int, _Marks] = {self.version: self._marks()}
        self._summaries: list[RunSummary] | None = None
        self._sections: dict[str, Any] | None = None

    @property
    def charted(self) -> list[Run]:
        """The runs drawn on the page (the first :data:`MAX_CHARTED_RUNS`)."""
        return self.runs[:MAX_CHARTED_RUNS]

    def refresh(self) -> bool:
        """Read what the runs appended; a new version when anything changed."""
        changed = [live.refresh() for live in self.live]
        if not any(changed):
            return False
        self.runs = [
            live.snapshot() if moved else run
            for live, run, moved in zip(self.live, self.runs, changed, strict=True)
        ]
        self.version += 1
        self.history[self.version] = self._marks()
        while len(self.history) > HISTORY:
            del self.history[min(self.history)]
        self._summaries = None
        self._sections = None
        return True

    def summaries(self) -> list[RunSummary]:
        """Every run's summary at this version (computed once per version)."""
        if self._summaries is None:
            self._summaries = [summarize(run) for run in self.runs]
        return self._summaries

    def _marks(self) -> _Marks:
        series = {
            (index, name): (len(s), s.steps[-1])
            for index, run in enumerate(self.charted)
            for name, s in run.series.items()
        }
        return _Marks(
            tuple(live.epoch for live in self.live[:MAX_CHARTED_RUNS]),
            tuple(len(run.alerts) for run in self.charted),
            series,
        )

    # -- what a page needs --------------------------------------------------------------------

    def updates(self, since: int, full: bool = False) -> dict[str, Any]:
        """What a page at version ``since`` needs to show this one.

        ``{"version": v}`` alone when nothing changed; else ``mode`` is ``"append"`` (per
        series the points logged since, ``series``, and the step-time breakdown and rank-band
        charts planned again, ``charts``) or ``"full"`` (every chart planned again: a page
        whose charts differ reloads), with the page's sections (``sections``: overview,
        alerts, runs and metric tables as HTML) and per run its restarts, samples counter and
        clock (:func:`~trainmon.report.marks.run_entries`).
        """
        if since == self.version:
            return {"version": self.version}
        mode = "full" if full else self._append_mode(since)
        runs = self.charted
        out: dict[str, Any] = {
            "version": self.version,
            "mode": mode,
            "sections": self.sections(),
            "runs": run_entries(
                runs,
                self.buckets,
                PALETTE,
                restarts=mode == "full",
                wall_after=None if mode == "full" else self._last_steps(since),
            ),
        }
        if mode == "full":
            out["charts"] = plan_charts(runs, self.buckets)
            out["alerts"] = alert_marks(runs, out["charts"])
            return out
        tails = self._tails(self.history[since])
        out["series"] = tails
        out["charts"] = []
        moved = {(tail["run"], tail["metric"]) for tail in tails}
        composite = [_composite(run) for run in runs]
        if any((i, name) in moved for i, names in enumerate(composite) for name in names):
            reduced = [replace(run, series=c) for run, c in zip(runs, composite, strict=True)]
            out["charts"] = [
                chart
                for chart in plan_charts(reduced, self.buckets)
                if chart["kind"] in ("stacked", "band")
            ]
        return out

    def _append_mode(self, since: int) -> str:
        """``"append"`` when the points since ``since`` only continue each series."""
        then = self.history.get(since)
        now = self.history[self.version]
        if then is None or then.epochs != now.epochs or then.alerts != now.alerts:
            return "full"
        if then.series.keys() != now.series.keys():
            return "full"  # a new metric: the page's charts change
        runs = self.charted
        for (index, name), (length, last) in then.series.items():
            steps = runs[index].series[name].steps
            if len(steps) < length or steps[length - 1] != last:
                return "full"  # steps inserted before the end (not rising): draw again
        return "append"

    def _last_steps(self, since: int) -> list[int | None]:
        """Per charted run, its last step at version ``since`` (None: it had none)."""
        last: list[int | None] = [None] * len(self.charted)
        for (index, _), (_, step) in self.history[since].series.items():
            known = last[index]
            last[index] = step if known is None else max(known, step)
        return last

    def _tails(self, then: _Marks) -> list[dict[str, Any]]:
        out = []
        for index, run in enumerate(self.charted):
            for name, s in run.series.items():
                start = then.series[(index, name)][0]
                if len(s) == start:
                    continue
                tail = Series(name, list(s.steps[start:]), list(s.values[start:]), s.x_unit)
                x, y = minmax_buckets(tail, self.buckets)
                marks, _ = nonfinite_steps(tail)
                out.append({"run": index, "metric": name, "x": x, "y": y, "nonfinite": marks})
        return out

    def sections(self) -> dict[str, Any]:
        """The page's sections that follow the data (HTML), computed once per version."""
        if self._sections is None:
            self._sections = live_sections(self.charted, self.summaries()[:MAX_CHARTED_RUNS])
        return self._sections


def _composite(run: Run) -> dict[str, Series]:
    """The series the step-time breakdown and the rank bands are drawn from."""
    wanted = {
        STEP_TIME,
        SLOWEST_RANK,
        *(metric for _, metric in BREAKDOWN),
        *BREAKDOWN_FALLBACK.values(),
    }
    return {
        name: s
        for name, s in run.series.items()
        if role(name) in wanted or cross_rank_split(name) is not None
    }
