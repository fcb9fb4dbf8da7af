"""The job's own torch.distributed store as a second channel for hang records.

Ranks on nodes that share no folder cannot see each other's ``hang-rank<r>.json``, but under
torchrun they all reach the rendezvous store at ``MASTER_ADDR:MASTER_PORT``. Each rank's
watchdog opens its own client of that store (public :class:`torch.distributed.TCPStore`,
lazily, on the watchdog thread) and sets:

* ``trainmon/hang/<job>/<rank>``: its hang record (JSON, a few kB) when a stall fires;
* ``trainmon/state/<job>/<rank>``: ``{step, time, host, pid, stalled}`` and, once it
  published a record, ``record_time`` (that record's ``time``): at once when its stall rule
  fires (with the record, in the same ``multi_set``) and when the stall resolves, every
  :data:`HEARTBEAT_S` while stalled, and while steps come at most every
  :data:`STEADY_STATE_S`, so a node that is gone (its state no longer refreshed) can be told
  from one that is hung (its watchdog still refreshes it);
* ``trainmon/hang-ranks/<job>``: the ranks that published a record, ``"<rank>,"`` appended
  once by each (after its record and a state are set).

The rank that merges the verdict reads that list, then the records and states of the listed
ranks it wants in one ``multi_get`` (one round trip whatever the number of ranks), after one
``check`` of all those keys: nothing ever blocks on an absent key (``multi_get`` would wait for
one until the operation's timeout); should a listed key be missing, or the store lack
``multi_get`` / ``append`` (an older torch), it reads key by key (``check``, then ``get``).
It writes each record into its own run folder, marked ``"via": "store"``, with ``last_seen``
(the time of the rank's latest state) and ``last_state`` (that state). Later reads
(:meth:`HangStore.sync`) name the records it already holds: of those ranks only the states
come (one ``check`` and one ``multi_get``), and a record again only when its rank's
``record_time`` says it changed, so the merging rank refreshes ``last_seen`` every few seconds
of the stall without downloading every record again, and the folder shows a rank whose state
stopped refreshing (its node or agent is gone).

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

__all__ = [
    "HEARTBEAT_S",
    "STEADY_STATE_S",
    "HangStore",
    "hang_key",
    "ranks_key",
    "state_key",
]

_log = get_logger("alerts.hang_store")

CONNECT_TIMEOUT_S = 3.0
"""How long the first connection may take (on the watchdog thread, once)."""
OP_TIMEOUT_S = 2.0
"""Each store operation's limit once connected."""
STEADY_STATE_S = 30.0
"""While steps come, the state is set at most this often (and only when its step changed).

Why so seldom: a stepping rank's state tells the merging rank only that the rank went on past
its record, which the state set at once when the stall resolved already says; the "gone"
verdict reads the refreshes only of ranks whose state says stalled (every
:data:`HEARTBEAT_S`), never of a stepping one. Once a second, as before, was a ``set`` a second
per rank on the job's rendezvous store for the whole run: 1,024 a second at 1,024 ranks. Every
30 s it is 34 a second, and the state still shows, within 30 s, how far a rank got."""
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


def _get(store: Any, keys: list[str], batched: bool) -> list[bytes | None]:
    """The values of ``keys``, None for an absent one: one ``check`` and one ``multi_get`` when
    the store has ``multi_get`` and every key is set, else key by key (``check``, then
    ``get``). Never waits for an absent key (``multi_get`` would, until its timeout)."""
    if not keys:
        return []
    if batched and store.check(keys):
        return list(store.multi_get(keys))
    return [store.get(key) if store.check([key]) else None for key in keys]


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
        self._state: tuple[Any, bool] | None = None
        self._state_at = 0.0
        self._record_time: float | None = None
        """The ``time`` of this rank's latest published record; its states name it."""
        self._listed = False
        self._old: set[int] = set()
        """Ranks whose record a read found older than its ``newer_than``: later reads take
        their state first, and their record again only once the state names a newer one."""

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

    def publish_record(self, record: Mapping[str, Any], *, now: float | None = None) -> bool:
        """Set this rank's hang record and, with it (one ``multi_set``), its state: stalled, at
        the record's step, naming the record by its ``time`` (``record_time``), so a reader
        that holds a copy can tell from the state alone whether the record changed. False when
        there is no store or it failed. ``now``: a monotonic time (tests), as for
        :meth:`publish_state`."""
        store = self._client()
        if store is None:
            return False
        data = orjson.dumps({k: v for k, v in record.items() if k != "path"})
        if len(data) > MAX_RECORD_BYTES:
            _log.warning("hang record of %d bytes not put in the job's store", len(data))
            return False
        written, step = record.get("time"), record.get("step")
        record_time = (
            float(written)
            if isinstance(written, int | float) and not isinstance(written, bool)
            else None
        )
        keys = [hang_key(self.job, self.rank), state_key(self.job, self.rank)]
        values = [data, self._state_bytes(step, stalled=True, record_time=record_time)]
        try:
            if _batched(store):
                store.multi_set(keys, values)  # a listed rank has both keys: no reader waits
                if not self._listed:
                    store.append(ranks_key(self.job), f"{self.rank},")
                    self._listed = True
            else:
                for key, value in zip(keys, values, strict=True):
                    store.set(key, value)
        except Exception as exc:
            self._fail("write to", exc)
            return False
        self._record_time = record_time
        self._state = (step, True)
        self._state_at = time.monotonic() if now is None else now
        return True

    @staticmethod
    def _state_bytes(step: Any, *, stalled: bool, record_time: float | None) -> bytes:
        state: dict[str, Any] = {
            "step": step,
            "time": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "stalled": stalled,
        }
        if record_time is not None:
            state["record_time"] = record_time
        return orjson.dumps(state)

    def publish_state(self, step: int, *, stalled: bool, now: float | None = None) -> bool:
        """Set ``{step, time, host, pid, stalled}`` (and ``record_time`` once a record was
        published) when due: the first at once; at once when the rank stalls or its stall
        resolves; while stalled, every :data:`HEARTBEAT_S`; while steps come, when the step
        changed, at most every :data:`STEADY_STATE_S`. ``now``: a monotonic time (tests)."""
        if self._given_up:
            return False
        now = time.monotonic() if now is None else now
        since = now - self._state_at
        last = self._state
        if last is None or stalled != last[1]:
            due = True  # the first state, a stall that fired, or one that resolved
        elif stalled:
            due = since >= HEARTBEAT_S
        else:
            due = step != last[0] and since >= STEADY_STATE_S
        if not due:
            return False
        store = self._client()
        if store is None:
            return False
        state = self._state_bytes(step, stalled=stalled, record_time=self._record_time)
        try:
            store.set(state_key(self.job, self.rank), state)
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
        ``multi_get`` (four operations in all), else key by key. :meth:`sync` with nothing
        held."""
        return self.sync(ranks, newer_than=newer_than)[0]

    def sync(
        self,
        ranks: Iterable[int],
        held: Mapping[int, Any] | None = None,
        *,
        newer_than: float | None = None,
    ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
        """``(records, states)`` of the ``ranks`` (this rank's left out): records as
        :meth:`fetch` gives them, and rank -> its latest state for those whose state was read.

        ``held``: rank -> the ``time`` of the copy of its record the caller holds. Of those
        ranks (and of those whose record an earlier read found older than ``newer_than``) only
        the state is read; their record comes again only when the state's ``record_time``
        names another one, written at or after ``newer_than``. The other ranks come as in
        :meth:`fetch`, record and state together, if the list of ranks that published names
        them. With ``multi_get``: the list (``check``, ``get``; only when some rank is neither
        held nor read before), one ``check`` and one ``multi_get`` for all the states (and the
        records of the ranks not held), and one of each more only when a record changed."""
        held = {} if held is None else held
        wanted = [rank for rank in ranks if rank != self.rank]
        store = self._client() if wanted else None
        if store is None:
            return {}, {}
        try:
            return self._sync(store, wanted, held, newer_than)
        except Exception as exc:
            self._fail("read from", exc)
            return {}, {}

    def _sync(
        self, store: Any, wanted: list[int], held: Mapping[int, Any], newer_than: float | None
    ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
        batched = _batched(store)
        known = [rank for rank in wanted if rank in held or rank in self._old]
        new = [rank for rank in wanted if rank not in held and rank not in self._old]
        if new and batched:
            index = ranks_key(self.job)
            listed = _listed(store.get(index)) if store.check([index]) else set()
            new = [rank for rank in new if rank in listed]
        raw_states: dict[int, bytes | None] = {}
        raw_records: dict[int, bytes | None] = {}
        if batched:  # a listed rank has both keys
            keys = [state_key(self.job, r) for r in known]
            keys += [k for r in new for k in (hang_key(self.job, r), state_key(self.job, r))]
            values = _get(store, keys, batched)
            raw_states.update(zip(known, values[: len(known)], strict=True))
            rest = values[len(known) :]
            raw_records.update(zip(new, rest[0::2], strict=True))
            raw_states.update(zip(new, rest[1::2], strict=True))
        else:  # key by key: a rank without a record is not asked for its state
            keys = [state_key(self.job, r) for r in known]
            raw_states.update(zip(known, _get(store, keys, batched), strict=True))
            keys = [hang_key(self.job, r) for r in new]
            raw_records.update(zip(new, _get(store, keys, batched), strict=True))
            present = [rank for rank in new if raw_records[rank] is not None]
            keys = [state_key(self.job, r) for r in present]
            raw_states.update(zip(present, _get(store, keys, batched), strict=True))
        states = {
            rank: state
            for rank, raw in raw_states.items()
            if raw is not None and (state := _decode(raw)) is not None
        }
        changed = [
            rank
            for rank in known
            if rank in states and _names_another(states[rank], held.get(rank), newer_than)
        ]
        keys = [hang_key(self.job, r) for r in changed]
        raw_records.update(zip(changed, _get(store, keys, batched), strict=True))
        records: dict[int, dict[str, Any]] = {}
        for rank, raw in raw_records.items():
            record = _decode(raw) if raw is not None else None
            if record is None or record.get("rank") != rank:
                continue
            written = record.get("time")
            if newer_than is not None and (
                not isinstance(written, int | float) or written < newer_than
            ):
                self._old.add(rank)  # an earlier stall's: read its state first from now on
                continue
            self._old.discard(rank)
            record["via"] = "store"
            state = states.get(rank)
            if state is not None and isinstance(state.get("time"), int | float):
                record["last_seen"] = state["time"]
                record["last_state"] = state
            records[rank] = record
        return records, states

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
            values = _get(store, keys, _batched(store))
            for rank, raw in zip(wanted, values, strict=True):
                if raw is not None and (state := _decode(raw)) is not None:
                    found[rank] = state
        except Exception as exc:
            self._fail("read from", exc)
        return found


def _names_another(state: Mapping[str, Any], held: Any, newer_than: float | None) -> bool:
    """Whether a rank's ``state`` names a record other than the one held (its ``time``:
    ``held``, None when none is), written at or after ``newer_than``. A state that names no
    record (its rank published none, or an older trainmon wrote it) says no."""
    at = state.get("record_time")
    if isinstance(at, bool) or not isinstance(at, int | float) or at == held:
        return False
    return newer_than is None or at >= newer_than
