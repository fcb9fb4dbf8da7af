"""The job's own torch.distributed store as a second channel for hang records.

Ranks on nodes that share no folder cannot see each other's ``hang-rank<r>.json``, but under
torchrun they all reach the rendezvous store at ``MASTER_ADDR:MASTER_PORT``. Each rank's
watchdog opens its own client of that store (public :class:`torch.distributed.TCPStore`,
lazily, on the watchdog thread) and sets:

* ``trainmon/hang/<job>/<rank>``: its hang record (JSON, a few kB) when a stall fires;
* ``trainmon/state/<job>/<rank>``: ``{step, time, host, pid}``, when the step changed (at most
  once a second) and every few seconds while stalled, so a node that is gone (its state no
  longer refreshed) can be told from one that is hung (its watchdog still refreshes it).

The rank that merges the verdict reads the other ranks' keys (``check`` first, then ``get``:
nothing blocks on an absent key) and writes each record into its own run folder, marked
``"via": "store"``, with ``last_seen`` (the time of the rank's latest state) and ``last_state``
(that state); while the stall lasts it refreshes both from :meth:`HangStore.states`, so the
folder shows a rank whose state stopped refreshing (its node or agent is gone).

Without torch.distributed initialised or without ``MASTER_ADDR`` /
``MASTER_PORT`` nothing is opened; a store that cannot be reached is given up for good after
one try, so a single process, or a job whose store is gone, pays nothing.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from trainmon.logging import get_logger

__all__ = ["STATE_EVERY_S", "HangStore", "hang_key", "state_key"]

_log = get_logger("alerts.hang_store")

CONNECT_TIMEOUT_S = 3.0
"""How long the first connection may take (on the watchdog thread, once)."""
OP_TIMEOUT_S = 2.0
"""Each store operation's limit once connected."""
STATE_EVERY_S = 1.0
"""The state is set at most this often while steps come."""
HEARTBEAT_S = 5.0
"""While stalled, the state is refreshed this often (a live watchdog on a hung rank)."""
MAX_RECORD_BYTES = 256 * 1024
"""A record bigger than this is not published (records are a few kB)."""


def hang_key(job: str, rank: int) -> str:
    """``trainmon/hang/<job>/<rank>``: one rank's latest hang record."""
    return f"trainmon/hang/{job}/{rank}"


def state_key(job: str, rank: int) -> str:
    """``trainmon/state/<job>/<rank>``: one rank's last step and when its watchdog saw it."""
    return f"trainmon/state/{job}/{rank}"


def _decode(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class HangStore:
    """A lazily opened client of the job's store; every method is a no-op without one and
    never raises (a failing store is dropped after the first error)."""

    def __init__(self, job: str, rank: int) -> None:
        self.job = job or "job"
        self.rank = rank
        self._store: Any = None
        self._given_up = False
        self._state: tuple[int, bool] | None = None
        self._state_at = 0.0

    # ---- connection ------------------------------------------------------------------------

    def _client(self) -> Any:
        """The store client, opened on first use; None while torch.distributed is not
        initialised (checked cheaply, torch is never imported here) or once it failed."""
        if self._store is not None or self._given_up:
            return self._store
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not host or not port:
            self._given_up = True
            return None
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return None  # maybe later: the process group may come after the Monitor
            self._store = dist.TCPStore(
                host,
                int(port),
                is_master=False,
                timeout=datetime.timedelta(seconds=CONNECT_TIMEOUT_S),
                wait_for_workers=False,
            )
            self._store.set_timeout(datetime.timedelta(seconds=OP_TIMEOUT_S))
        except Exception as exc:
            self._fail("open", exc)
        return self._store

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self._given_up:
            _log.warning(
                "hang records via the job's store are off: could not %s it (%s)", what, exc
            )
        self._given_up = True
        self._store = None

    @property
    def usable(self) -> bool:
        """Whether a store is open (or may still be opened)."""
        return not self._given_up

    # ---- writing ---------------------------------------------------------------------------

    def publish_record(self, record: Mapping[str, Any]) -> bool:
        """Set this rank's hang record; False when there is no store or it failed."""
        store = self._client()
        if store is None:
            return False
        data = orjson.dumps({k: v for k, v in record.items() if k != "path"})
        if len(data) > MAX_RECORD_BYTES:
            _log.warning("hang record of %d bytes not put in the job's store", len(data))
            return False
        try:
            store.set(hang_key(self.job, self.rank), data)
            return True
        except Exception as exc:
            self._fail("write to", exc)
            return False

    def publish_state(self, step: int, *, stalled: bool, now: float | None = None) -> bool:
        """Set ``{step, time, host, pid, stalled}`` when it changed (at most every
        :data:`STATE_EVERY_S`, but at once when it stalls) or, while stalled, every
        :data:`HEARTBEAT_S`."""
        if self._given_up:
            return False
        now = time.monotonic() if now is None else now
        changed = (step, stalled) != self._state
        since = now - self._state_at
        stalls = stalled and (self._state is None or not self._state[1])
        if not (changed and (since >= STATE_EVERY_S or stalls)) and not (
            stalled and since >= HEARTBEAT_S
        ):
            return False
        store = self._client()
        if store is None:
            return False
        state = {
            "step": step,
            "time": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "stalled": stalled,
        }
        try:
            store.set(state_key(self.job, self.rank), orjson.dumps(state))
        except Exception as exc:
            self._fail("write to", exc)
            return False
        self._state, self._state_at = (step, stalled), now
        return True

    # ---- reading ---------------------------------------------------------------------------

    def fetch(
        self, ranks: Iterable[int], *, newer_than: float | None = None
    ) -> dict[int, dict[str, Any]]:
        """rank -> its hang record from the store (``"via": "store"``, ``"last_seen"``: the
        time of its latest state, and ``"last_state"``: that state), for the ``ranks`` whose
        key is set; records written before ``newer_than`` (a wall time) are skipped. Never
        waits for an absent key."""
        wanted = [rank for rank in ranks if rank != self.rank]
        store = self._client() if wanted else None
        if store is None:
            return {}
        found: dict[int, dict[str, Any]] = {}
        try:
            for rank in wanted:
                key = hang_key(self.job, rank)
                if not store.check([key]):
                    continue
                record = _decode(store.get(key))
                if record is None or record.get("rank") != rank:
                    continue
                written = record.get("time")
                if newer_than is not None and (
                    not isinstance(written, int | float) or written < newer_than
                ):
                    continue
                record["via"] = "store"
                skey = state_key(self.job, rank)
                state = _decode(store.get(skey)) if store.check([skey]) else None
                if state is not None and isinstance(state.get("time"), int | float):
                    record["last_seen"] = state["time"]
                    record["last_state"] = state
                found[rank] = record
        except Exception as exc:
            self._fail("read from", exc)
        return found

    def states(self, ranks: Iterable[int]) -> dict[int, dict[str, Any]]:
        """rank -> its latest state, for the ``ranks`` that set one."""
        store = self._client()
        if store is None:
            return {}
        found: dict[int, dict[str, Any]] = {}
        try:
            for rank in ranks:
                key = state_key(self.job, rank)
                if store.check([key]) and (state := _decode(store.get(key))) is not None:
                    found[rank] = state
        except Exception as exc:
            self._fail("read from", exc)
        return found
