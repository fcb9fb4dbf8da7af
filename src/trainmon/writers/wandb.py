"""The Weights & Biases writer: one W&B run per writing rank, one ``run.log`` per step.

The run starts in the constructor (on the thread that builds the Monitor); every later call
comes from the background thread, so training never waits on W&B, and every failure path ends
offline or with this writer stopped, never with training stopped. Behaviour is in the README
("Backend details").
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from trainmon import extras
from trainmon.config import DEFAULT_JOB_NAME, TrainmonConfig, WandbConfig
from trainmon.core.events import Extra, Histogram, Hparams, Number, StepScalars, Text
from trainmon.core.place import ProcessPlace
from trainmon.core.writer import RunStatus, Writer
from trainmon.errors import first_line
from trainmon.logging import get_logger

_log = get_logger("wandb")

#: W&B's exit code for each way a run can end (see :meth:`Writer.finalize`)
_EXIT_CODES: dict[RunStatus, int] = {"success": 0, "failed": 1, "aborted": 255}


class WandbWriter(Writer):
    """Logs each step's scalars to a W&B run (rank 0's, or with per-rank output, each rank's).

    ``per_rank`` names the run ``<name or job>-rank<r>`` (and suffixes ``id`` the same way) and
    puts every rank's run in one group: ``group``, or by default that same name or job. ``job``
    is the other writers' job name (see :func:`trainmon.writers.run_identity`).
    """

    kind = "wandb"

    def __init__(
        self,
        section: WandbConfig,
        place: ProcessPlace | None = None,
        *,
        per_rank: bool = False,
        job: str = DEFAULT_JOB_NAME,
    ) -> None:
        place = place or ProcessPlace()
        entity = _entity(section)
        wandb = extras.require("wandb", "wandb", "The W&B writer")
        name, group, run_id = section.name, section.group, section.id
        if per_rank:
            base = section.name or job
            name = f"{base}-rank{place.rank}"
            group = group or base
            run_id = f"{run_id}-rank{place.rank}" if run_id else None
        init_kwargs: dict[str, Any] = {
            "entity": entity,
            "project": section.project,
            "group": group,
            "name": name,
            "id": run_id,
            "resume": section.resume,
            "tags": list(section.tags) or None,
            "config": dict(section.config) or None,
            "dir": section.dir,
            "reinit": "create_new",
            "settings": wandb.Settings(console="off", silent=True),
        }
        self._wandb = wandb
        self._init_kwargs = init_kwargs
        self._mode = section.mode
        self._run = _start_run(wandb, init_kwargs, section.mode)
        self.local_dir = _local_dir(self._run)
        self.location = self.local_dir or f"W&B project {section.project!r} (disabled)"
        #: Records dropped because their step was below one already logged (W&B ignores those).
        self.dropped_records = 0
        self._min_step = _current_step(self._run)
        self._failed = False
        self._closed = False
        self._exit_code = 0

    @classmethod
    def from_config(cls, config: TrainmonConfig, place: ProcessPlace) -> WandbWriter:
        """The writer for ``config.wandb`` on this rank (the writer factory's entry point)."""
        from trainmon.writers.identity import run_identity

        return cls(
            config.wandb,
            place,
            per_rank=config.trainmon.per_rank_output,
            job=run_identity(config, place).name,
        )

    def write(self, records: Sequence[StepScalars]) -> None:
        """One ``run.log`` per step (consecutive records of a step merged); lower steps dropped."""
        if self._failed:
            raise RuntimeError("the W&B writer stopped after an earlier W&B error")
        log = self._run.log
        step: int | None = None
        values: dict[str, Number] = {}
        try:
            for record in records:
                if record.step != step:
                    if values:
                        log(values, step=step)
                        values = {}
                    if record.step < self._min_step:
                        self._drop(record)
                        step = None
                        continue
                    step = self._min_step = record.step
                values.update(record.values)
            if values:
                log(values, step=step)
        except Exception:
            self._failed = True
            raise

    def write_extras(self, records: Sequence[Extra]) -> None:
        """Histograms as ``wandb.Histogram``, text as a one-row ``wandb.Table`` (step, text) at
        their step (merged into that step's open row; a lower step is dropped as for scalars),
        and hyper-parameters into the run's config."""
        if self._failed:
            raise RuntimeError("the W&B writer stopped after an earlier W&B error")
        wandb = self._wandb
        try:
            for record in records:
                if isinstance(record, Hparams):
                    self._run.config.update(dict(record.hparams), allow_val_change=True)
                    continue
                if isinstance(record, Histogram):
                    if not record.counts:  # no finite value: nothing W&B can draw
                        continue
                    value: Any = wandb.Histogram(
                        np_histogram=(list(record.counts), list(record.edges))
                    )
                elif isinstance(record, Text):
                    value = wandb.Table(columns=["step", "text"], data=[[record.step, record.text]])
                else:
                    continue
                if record.step < self._min_step:
                    self._drop(StepScalars(record.step, record.wall_time, {}))
                    continue
                self._min_step = record.step
                self._run.log({record.name: value}, step=record.step)
        except Exception:
            self._failed = True
            raise

    def flush(self) -> None:
        """Nothing to do: W&B sends in the background, and its open row waits for a later step."""

    def finalize(self, status: RunStatus) -> None:
        """Remember how the run ended: :meth:`close` finishes it with exit code 0 (success),
        1 (failed) or 255 (aborted), which W&B shows as finished, failed and crashed-like."""
        self._exit_code = _EXIT_CODES[status]

    def close(self) -> None:
        """Finish the run (once), and end W&B's service process if no other run uses it."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run.finish(exit_code=self._exit_code)
        finally:
            _end_idle_service(self._wandb)

    def identity(self) -> Mapping[str, Any] | None:
        """The run's id (and project, entity): a run resumed from a checkpoint continues it."""
        if _is_disabled(self._run):
            return None
        return {
            "run_id": str(self._run.id),
            "project": getattr(self._run, "project", None),
            "entity": getattr(self._run, "entity", None),
        }

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:
        """Continue the saved W&B run instead of the one started for this process (which is
        finished, and its offline folder, holding nothing, removed).

        Online, W&B's rewind (``resume_from="<id>?_step=<step - 1>"``) drops the steps
        ``>= step`` the cut-short run logged, so the resumed run's values replace them; where
        the server does not offer rewind, the run is resumed (``resume="allow"``) and W&B
        accepts only steps past the last one it has, so the re-run steps up to there are left
        out of W&B (counted in :attr:`dropped_records`; the other writers keep them).
        Offline, the new offline folder carries the same run id: ``wandb sync --append``
        adds it to the run.
        """
        run_id = identity.get("run_id") if identity is not None else None
        if not isinstance(run_id, str) or not run_id or run_id == str(self._run.id):
            return
        fresh, fresh_local_dir = self._run, self.local_dir
        offline = _is_offline(fresh)
        with _quiet_terminal():
            fresh.finish()
        if offline and fresh_local_dir and Path(fresh_local_dir).name.startswith("offline-run-"):
            shutil.rmtree(fresh_local_dir, ignore_errors=True)
        kwargs = {**self._init_kwargs, "id": run_id}
        mode = "offline" if offline else self._mode
        run = None
        if not offline and step > 0:
            try:
                with _quiet_terminal():
                    run = self._wandb.init(
                        mode=mode,
                        **{**kwargs, "resume": None},
                        resume_from=f"{run_id}?_step={step - 1}",
                    )
            except Exception:
                _log.info("W&B rewind is not available; resuming the run instead", exc_info=True)
        if run is None:
            run = _start_run(self._wandb, {**kwargs, "resume": None if offline else "allow"}, mode)
        self._run = run
        self.local_dir = _local_dir(run)
        self.location = self.local_dir or self.location
        self._min_step = _current_step(run)

    def _drop(self, record: StepScalars) -> None:
        self.dropped_records += 1
        if self.dropped_records == 1:
            _log.warning(
                "W&B writer: step %d arrived after step %d was logged; W&B accepts only "
                "increasing steps, so that record is left out of the W&B run (the other "
                "writers keep it; further such records are counted in "
                "WandbWriter.dropped_records, not printed)",
                record.step,
                self._min_step,
            )


def _entity(section: WandbConfig) -> str | None:
    """``team`` (DeepSpeed's key) or ``entity`` (W&B's); the config refuses two that differ."""
    return section.team or section.entity


#: W&B's error reporting (Sentry) is off unless the user set it: nothing leaves the machine
#: but what the user configured.
WANDB_DEFAULTS = {"WANDB_ERROR_REPORTING": "false"}


def _start_run(wandb: ModuleType, kwargs: dict[str, Any], mode: str | None) -> Any:
    """``wandb.init``, falling back to offline (with one warning) instead of failing."""
    for key, value in WANDB_DEFAULTS.items():
        os.environ.setdefault(key, value)
    why_offline = None
    if mode is None and not os.environ.get("WANDB_MODE") and not _has_credentials(wandb):
        mode = "offline"
        why_offline = "no W&B API key was found (WANDB_API_KEY, ~/.netrc or `wandb login`)"
    try:
        with _quiet_terminal():
            run = wandb.init(mode=mode, **kwargs)
    except Exception as exc:
        if (mode or os.environ.get("WANDB_MODE", "")) in ("offline", "dryrun", "disabled"):
            raise
        why_offline = f"wandb.init failed ({type(exc).__name__}: {first_line(exc)})"
        with _quiet_terminal():
            run = wandb.init(mode="offline", **kwargs)
    if why_offline is not None:
        where = _local_dir(run) or "<the run's folder>"
        _log.warning(
            "%s, so the W&B run is logged offline to %s; upload it later with: wandb sync %s",
            why_offline,
            where,
            where,
        )
    elif not _is_offline(run):
        url = getattr(run, "url", None)
        if url:
            _log.info("W&B run %s: %s", getattr(run, "name", ""), url)
    return run


@contextlib.contextmanager
def _quiet_terminal() -> Iterator[None]:
    """Mute W&B's terminal messages while a run starts (they go to W&B's debug log instead).

    A run's ``silent`` setting does not cover every message (``Loaded credentials ... from
    WANDB_API_KEY`` is printed anyway), so W&B's own global switch is set for the duration.
    """
    try:
        term: Any = importlib.import_module("wandb.errors.term")
        _ = _wandb_setup().singleton().settings  # loading the settings resets the switch: do it now
        saved = term._silent
    except Exception:  # another wandb version: its messages may show
        yield
        return
    term._silent = True
    try:
        yield
    finally:
        term._silent = saved


def _has_credentials(wandb: ModuleType) -> bool:
    """Whether W&B would find credentials (env, netrc, settings file): local, never prompts."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        wbauth = importlib.import_module("wandb.sdk.lib.wbauth")
        host = _wandb_setup().singleton().settings.base_url
        return (
            wbauth.authenticate_session(
                host=host, source="trainmon", prompt=False, update_session=False
            )
            is not None
        )
    except (ImportError, AttributeError, TypeError):  # an older wandb: its own lookup
        try:
            return bool(wandb.api.api_key)
        except Exception:
            return True  # unknown: let wandb.init decide (and fall back if it fails)
    except Exception:  # credentials W&B would reject: wandb.init fails, then falls back
        return True


def _wandb_setup() -> ModuleType:
    """W&B's process-wide state (settings, service, active runs): ``wandb.sdk.wandb_setup``.

    Imported by name so that type-checking trainmon does not need wandb installed.
    """
    return importlib.import_module("wandb.sdk.wandb_setup")


def _local_dir(run: Any) -> str:
    """The run's local folder (what ``wandb sync`` takes), or "" for a disabled run."""
    if _is_disabled(run):
        return ""
    try:
        sync_dir = run.settings.sync_dir
        if sync_dir:
            return str(sync_dir)
    except Exception:
        pass
    try:
        return str(Path(run.dir).parent)
    except Exception:
        return ""


def _is_offline(run: Any) -> bool:
    try:
        return bool(run.offline)
    except Exception:
        return False


def _is_disabled(run: Any) -> bool:
    try:
        return bool(run.disabled)
    except Exception:
        return False


def _current_step(run: Any) -> int:
    """W&B's next accepted step (0, or past the last step of a resumed run)."""
    try:
        step = run.step
    except Exception:
        return 0
    return step if isinstance(step, int) else 0


def _end_idle_service(wandb: ModuleType) -> None:
    """Stop W&B's background service process once no run in this process is active."""
    try:
        if _wandb_setup().singleton().most_recent_active_run is not None:
            return
        wandb.teardown()
    except (Exception, SystemExit):  # teardown calls sys.exit when the service failed
        _log.debug("could not stop the W&B service process", exc_info=True)
