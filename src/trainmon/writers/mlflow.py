"""The MLflow writer: one MLflow run per writing rank, metrics sent in batches.

Only ``MlflowClient`` is used (never the global active run), so the user's own MLflow runs are
untouched; values are buffered in :meth:`write` and sent by :meth:`flush` in ``log_batch`` calls.
Behaviour on errors and odd values is in the README ("Backend details").
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import os
import posixpath
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from trainmon import extras, redact
from trainmon.config import DEFAULT_JOB_NAME, MlflowConfig, TrainmonConfig
from trainmon.core.events import Extra, Hparams, StepScalars
from trainmon.core.place import ProcessPlace
from trainmon.core.writer import RunStatus, Writer
from trainmon.logging import get_logger

#: Most metrics MLflow accepts in one ``log_batch`` request.
MAX_METRICS_PER_BATCH = 1000
#: Longest wait for an HTTP tracking server to answer at start-up.
START_TIMEOUT_S = 10.0
_MAX_KEY_LENGTH = 250
#: Longest parameter value MLflow stores (longer values are cut, ending in ``…``).
MAX_PARAM_CHARS = 6000
_log = get_logger("mlflow")

#: MLflow's run status for each way a run can end (see :meth:`Writer.finalize`)
_MLFLOW_STATUS: dict[RunStatus, str] = {
    "success": "FINISHED",
    "failed": "FAILED",
    "aborted": "KILLED",
}
_INVALID_KEY = re.compile(r"[^/\w.\- ]")


def mlflow_key(name: str) -> str:
    """A metric name MLflow accepts: ``train/loss`` stays, other characters become ``_``."""
    key = _INVALID_KEY.sub("_", name)
    norm = posixpath.normpath(key) if key else ""
    if norm != key or norm in ("", ".") or norm.startswith(("..", "/")):
        key = re.sub(r"[/.]", "_", key) or "_"
    if len(key) > _MAX_KEY_LENGTH:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        key = f"{key[: _MAX_KEY_LENGTH - 9]}-{digest}"
    return key


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


class MlflowWriter(Writer):
    """Logs each step's scalars to an MLflow run, batched per flush.

    ``per_rank`` names the run ``<run_name or job>-rank<r>`` and tags it ``trainmon.rank``;
    ``job`` is the other writers' job name.
    """

    kind = "mlflow"

    def __init__(
        self,
        section: MlflowConfig,
        place: ProcessPlace | None = None,
        *,
        per_rank: bool = False,
        job: str = DEFAULT_JOB_NAME,
    ) -> None:
        place = place or ProcessPlace()
        extras.require("mlflow", "mlflow", "The MLflow writer")
        self._entities: Any = importlib.import_module("mlflow.entities")
        tracking: Any = importlib.import_module("mlflow.tracking")
        check_reachable(section.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", ""))
        self._client = tracking.MlflowClient(tracking_uri=section.tracking_uri)
        # MLflow >= 2.8 may log asynchronously (MLFLOW_ENABLE_ASYNC_LOGGING): flush must not
        self._sync: dict[str, bool] = (
            {"synchronous": True}
            if "synchronous" in inspect.signature(self._client.log_batch).parameters
            else {}
        )
        self.tracking_uri = str(self._client.tracking_uri)
        tags = {str(k): _text(v) for k, v in section.tags.items()}
        if per_rank:
            tags.setdefault("trainmon.rank", str(place.rank))
            tags.setdefault("trainmon.world_size", str(place.world_size))
        if section.run_id is not None:
            run = self._client.get_run(section.run_id)
            self.run_id: str = run.info.run_id
            self.experiment_id: str = run.info.experiment_id
            self._client.update_run(self.run_id, status="RUNNING")
            if tags:
                self._log_batch(tags=[self._entities.RunTag(k, v) for k, v in tags.items()])
        else:
            self.experiment_id = self._experiment(section.experiment)
            name = section.run_name or job
            if per_rank:
                name = f"{name}-rank{place.rank}"
            run = self._client.create_run(self.experiment_id, run_name=name, tags=tags)
            self.run_id = run.info.run_id
        params = [self._entities.Param(str(k), _text(v)) for k, v in section.params.items()]
        for start in range(0, len(params), 100):
            self._log_batch(params=params[start : start + 100])
        self._params: dict[str, str] = {p.key: p.value for p in params}
        self._warned_param = False
        self.location = f"MLflow run {self.run_id} at {redact.credentials(self.tracking_uri)}"
        #: Metrics lost because the request that carried them failed.
        self.dropped_metrics = 0
        self._keys: dict[str, str] = {}
        self._pending: list[Any] = []
        self._closed = False
        self._end_status = "FINISHED"

    @classmethod
    def from_config(cls, config: TrainmonConfig, place: ProcessPlace) -> MlflowWriter:
        """The writer for ``config.mlflow`` on this rank (the writer factory's entry point)."""
        from trainmon.writers.identity import run_identity

        return cls(
            config.mlflow,
            place,
            per_rank=config.trainmon.per_rank_output,
            job=run_identity(config, place).name,
        )

    def _experiment(self, name: str | None) -> str:
        """The id of the experiment called ``name`` (created when missing)."""
        name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or None
        if name is None:
            env_id = os.environ.get("MLFLOW_EXPERIMENT_ID")
            if env_id:
                return env_id
            name = "Default"
        found = self._client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self._client.create_experiment(name))
        except Exception:  # another rank created it in the meantime
            found = self._client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _log_batch(self, **entities: Sequence[Any]) -> None:
        self._client.log_batch(self.run_id, **self._sync, **entities)

    # ---- the writer contract -----------------------------------------------------------------

    def write(self, records: Sequence[StepScalars]) -> None:
        """Buffer one ``Metric`` per value; a full batch is sent at once."""
        metric = self._entities.Metric
        keys = self._keys
        pending = self._pending
        for record in records:
            timestamp = int(record.wall_time * 1000)
            step = record.step
            for name, value in record.values.items():
                key = keys.get(name)
                if key is None:
                    key = keys[name] = mlflow_key(name)
                pending.append(metric(key, _as_float(value), timestamp, step))
        if len(pending) >= MAX_METRICS_PER_BATCH:
            self._send(whole_batches_only=True)

    def write_extras(self, records: Sequence[Extra]) -> None:
        """Hyper-parameters as run params (histograms and text are not shown by MLflow).

        MLflow params cannot change once logged: a key logged again with another value is
        kept as first logged, with one warning (the other writers get the new value)."""
        for record in records:
            if not isinstance(record, Hparams):
                continue
            new = []
            for name, value in record.hparams.items():
                key, text = mlflow_key(name), _text(value)
                if len(text) > MAX_PARAM_CHARS:
                    text = text[: MAX_PARAM_CHARS - 1] + "…"
                before = self._params.get(key)
                if before is None:
                    self._params[key] = text
                    new.append(self._entities.Param(key, text))
                elif before != text and not self._warned_param:
                    self._warned_param = True
                    _log.warning(
                        "MLflow writer: param %r was logged as %r and is now %r; MLflow params "
                        "cannot change, so the run keeps the first value (further changes are "
                        "not printed)",
                        key,
                        before,
                        text,
                    )
            for start in range(0, len(new), 100):
                self._log_batch(params=new[start : start + 100])

    def flush(self) -> None:
        """Send every buffered metric (``log_batch``, up to 1000 per request)."""
        self._send(whole_batches_only=False)

    def finalize(self, status: RunStatus) -> None:
        """Remember how the run ended: :meth:`close` ends it FINISHED, FAILED or KILLED."""
        self._end_status = _MLFLOW_STATUS[status]

    def close(self) -> None:
        """Send what is left and end the run (FINISHED unless :meth:`finalize` said otherwise);
        calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            self._client.set_terminated(self.run_id, self._end_status, int(time.time() * 1000))

    def identity(self) -> Mapping[str, Any]:
        """The run's id and tracking URI: a run resumed from a checkpoint logs into it."""
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri}

    def resume(self, step: int, identity: Mapping[str, Any] | None) -> None:
        """Log into the saved run again (marked RUNNING); the run this writer started for the
        resumed process, still empty, is deleted. MLflow keeps every value it was sent, so the
        steps ``>= step`` that the cut-short run logged stay in its history beside the
        resumed run's values (MLflow has no way to remove them)."""
        run_id = identity.get("run_id") if identity is not None else None
        if not isinstance(run_id, str) or run_id == self.run_id:
            return
        saved = self._client.get_run(run_id)  # raises when the tracking store lost it
        fresh = self.run_id
        self.flush()
        self.run_id = saved.info.run_id
        self.experiment_id = saved.info.experiment_id
        self._client.update_run(self.run_id, status="RUNNING")
        self.location = f"MLflow run {self.run_id} at {redact.credentials(self.tracking_uri)}"
        with contextlib.suppress(Exception):  # a store without deletes keeps an empty run
            self._client.delete_run(fresh)

    def _send(self, *, whole_batches_only: bool) -> None:
        pending = self._pending
        sent = 0
        try:
            while len(pending) - sent >= (MAX_METRICS_PER_BATCH if whole_batches_only else 1):
                batch = pending[sent : sent + MAX_METRICS_PER_BATCH]
                self._log_batch(metrics=batch)
                sent += len(batch)
        except Exception:
            self.dropped_metrics += len(pending) - sent
            pending.clear()
            raise
        del pending[:sent]


#: MLflow's own HTTP retries, bounded unless the user set them (its defaults retry a server
#: answering 500 for minutes); telemetry off unless the user opted in (nothing leaves the
#: machine but what the user configured).
MLFLOW_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


def bound_mlflow_requests() -> None:
    """Set :data:`MLFLOW_DEFAULTS` in the environment where the user has not set them."""
    for key, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(key, value)


def mlflow_secrets(uri: str) -> list[str]:
    """What no message may show: the URI's secrets, the password and the Basic token of the
    URI's user or ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``."""
    import urllib.parse

    from trainmon.writers.deferred import basic_auth_secrets

    found: list[str] = []
    try:
        parts = urllib.parse.urlsplit(uri)
        found += [v for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
        found += basic_auth_secrets(parts.username, parts.password)
    except ValueError:
        found.append(uri)
    found += basic_auth_secrets(
        os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    )
    return found


def check_reachable(uri: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Fail fast, with the address, when an HTTP tracking server does not answer at all.

    MLflow's own client would retry with back-off for minutes before giving up; any HTTP
    answer (even 401 or 404) counts as reachable here, only a connection failure does not.
    """
    if not uri.lower().startswith(("http://", "https://")):
        return
    try:
        probe = redact.without_userinfo(uri).split("?", 1)[0].rstrip("/") + "/health"
        with urllib.request.urlopen(probe, timeout=timeout_s):
            pass
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        shown = redact.credentials(uri)
        raise ConnectionError(
            f"the MLflow tracking server at {shown} does not answer ({reason}); check "
            f"mlflow.tracking_uri (or MLFLOW_TRACKING_URI) and that the server is up"
        ) from None


def _as_float(value: float | int) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond the range of a float
        return float("inf") if value > 0 else float("-inf")
