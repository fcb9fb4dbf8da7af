"""The job's own torch.distributed store as a second channel for hang records.

Ranks on nodes that share no folder cannot see each other's ``hang-rank<r>.json``, but under
torchrun they all reach the rendezvous store at ``MASTER_ADDR:MASTER_PORT``. Each rank's
watchdog opens its own client of that store (public :class:`torch.distributed.TCPStore`,
lazily, on the watchdog thread) and sets:

* ``trainmon/hang/<job>/<rank>``: its hang record (JSON, a few kB) when a stall fires;
* ``trainmon/state/<job>/<rank>``: ``{step, time, host, pid}``, when the step changed (at most
  once a second) and every few seconds while stalled, so a node that is gone (its state no
  longer refreshed) can be told from one that is hung (its watchdog still refreshes it);
* ``trainmon/hang-ranks/<job>``: the ranks that published a record, ``"<rank>,"`` appended
  once by each (after its record and a state are set).

The rank that merges the verdict reads that list, then the records and states of the listed
ranks it wants in one ``multi_get`` (one round trip whatever the number of ranks), after one
``check`` of all those keys: nothing ever blocks on an absent key (``multi_get`` would wait for
one until the operation's timeout); should a listed key be missing, or the store lack
``multi_get`` / ``append`` (an older torch), it reads key by key (``check``, then ``get``).
It writes each record into its own run folder, marked ``"via": "store"``, with ``last_seen``
(the time of the rank's latest state) and ``last_state`` (that state); while the stall lasts
it refreshes both from :meth:`HangStore.states` (one ``check`` and one ``multi_get`` too), so
the folder shows a rank whose state stopped refreshing (its node or agent is gone).

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

__all__ = ["STATE_EVERY_S", "HangStore", "hang_key", "ranks_key", "state_key"]

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


def ranks_key(job: str) -> str:
    """``trainmon/hang-ranks/<job>``: ``"<rank>,"`` for each rank that published a record."""
    return f"trainmon/hang-ranks/{job}"


def _batched(store: Any) -> bool:
    """Whether ``store`` reads and sets many keys in one round trip, and appends."""
    names = ("multi_get", "multi_set", "append")
    return all(callable(getattr(store, name, None)) for name in names)


def _listed(raw: bytes) -> set[int]:
    """The ranks of a ``trainmon/hang-ranks/<job>`` value (``b"3,17,3,"``)."""
    return {int(part) for part in raw.split(b",") if part.strip().isdigit()}


def _decode(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class HangStore:
    """A lazily opened client of the job's store; every method is a no-op without one and
    never raises (a failing store is dropped after the first error)."""

    def __init__(self, job: str, rank: int, *, client: Any = None) -> None:
        """``client``: an open store client to use instead of opening one from
        ``MASTER_ADDR:MASTER_PORT`` (tests and benchmarks)."""
        self.job = job or "job"
        self.rank = rank
        self._store: Any = client
        self._given_up = False
        self._state: tuple[int, bool] | None = None
        self._state_at = 0.0
        self._listed = False

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
            if not _batched(store):
                store.set(hang_key(self.job, self.rank), data)
                return True
            keys, values = [hang_key(self.job, self.rank)], [data]
            if self._state is None:  # a listed rank has both keys: the reader never waits
                keys.append(state_key(self.job, self.rank))
                values.append(self._state_bytes(record.get("step"), stalled=True))
            store.multi_set(keys, values)
            if not self._listed:
                store.append(ranks_key(self.job), f"{self.rank},")
                self._listed = True
            return True
        except Exception as exc:
            self._fail("write to", exc)
            return False

    @staticmethod
    def _state_bytes(step: Any, *, stalled: bool) -> bytes:
        state = {
            "step": step,
            "time": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "stalled": stalled,
        }
        return orjson.dumps(state)

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
        try:
            store.set(state_key(self.job, self.rank), self._state_bytes(step, stalled=stalled))
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
        waits for an absent key: the listed ranks' records and states come in one
        ``multi_get`` (four operations in all), else key by key."""
        wanted = [rank for rank in ranks if rank != self.rank]
        store = self._client() if wanted else None
        if store is None:
            return {}
        found: dict[int, dict[str, Any]] = {}
        try:
            pairs = self._read_batched(store, wanted) if _batched(store) else None
            if pairs is None:
                pairs = self._read_each(store, wanted)
            for rank, (raw, raw_state) in pairs.items():
                record = _decode(raw)
                if record is None or record.get("rank") != rank:
                    continue
                written = record.get("time")
                if newer_than is not None and (
                    not isinstance(written, int | float) or written < newer_than
                ):
                    continue
                record["via"] = "store"
                state = _decode(raw_state) if raw_state is not None else None
                if state is not None and isinstance(state.get("time"), int | float):
                    record["last_seen"] = state["time"]
                    record["last_state"] = state
                found[rank] = record
        except Exception as exc:
            self._fail("read from", exc)
        return found

    def _read_batched(
        self, store: Any, wanted: list[int]
    ) -> dict[int, tuple[bytes, bytes | None]] | None:
        """rank -> (record, state) of the ``wanted`` ranks the list names, in one
        ``multi_get`` after one ``check`` of its keys; None when one of them is missing."""
        index = ranks_key(self.job)
        if not store.check([index]):
            return {}
        listed = _listed(store.get(index))
        ranks = [rank for rank in wanted if rank in listed]
        if not ranks:
            return {}
        keys = [key for r in ranks for key in (hang_key(self.job, r), state_key(self.job, r))]
        if not store.check(keys):
            return None  # a listed key is gone (the store was reset?): key by key
        values = store.multi_get(keys)
        return {rank: (values[2 * i], values[2 * i + 1]) for i, rank in enumerate(ranks)}

    def _read_each(self, store: Any, wanted: list[int]) -> dict[int, tuple[bytes, bytes | None]]:
        """rank -> (record, state or None), key by key (``check``, then ``get``)."""
        pairs: dict[int, tuple[bytes, bytes | None]] = {}
        for rank in wanted:
            key = hang_key(self.job, rank)
            if not store.check([key]):
                continue
            raw = store.get(key)
            skey = state_key(self.job, rank)
            pairs[rank] = (raw, store.get(skey) if store.check([skey]) else None)
        return pairs

    def states(self, ranks: Iterable[int]) -> dict[int, dict[str, Any]]:
        """rank -> its latest state, for the ``ranks`` that set one (one ``check`` and one
        ``multi_get`` when all have, else key by key)."""
        wanted = list(ranks)
        store = self._client() if wanted else None
        if store is None:
            return {}
        found: dict[int, dict[str, Any]] = {}
        try:
            keys = [state_key(self.job, rank) for rank in wanted]
            if _batched(store) and store.check(keys):
                values = list(store.multi_get(keys))
            else:
                values = [store.get(key) if store.check([key]) else None for key in keys]
            for rank, raw in zip(wanted, values, strict=True):
                if raw is not None and (state := _decode(raw)) is not None:
                    found[rank] = state
        except Exception as exc:
            self._fail("read from", exc)
        return found
