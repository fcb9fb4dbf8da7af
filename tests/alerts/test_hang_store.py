"""Rank 0 reads the other ranks' hang records from a real TCPStore on loopback in one
``multi_get``, never waits for a rank that published nothing, and later reads only the states
of the ranks whose record it holds, and a record again only when it changed."""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from alert_helpers import ClockedWatchdog

from trainmon.alerts import watchdog as watchdog_module
from trainmon.alerts.hang import read_records
from trainmon.alerts.hang_store import OP_TIMEOUT_S, HangStore, hang_key, ranks_key, state_key
from trainmon.report.hang_currency import judge

dist = pytest.importorskip("torch.distributed")


class Counting:
    """A store client that counts its operations; ``hide`` names methods it pretends to lack
    (an older torch)."""

    def __init__(self, store: Any, hide: tuple[str, ...] = ()) -> None:
        self._store = store
        self._hide = set(hide)
        self.calls: Counter[str] = Counter()
        self.read: list[str] = []
        """The keys of every ``multi_get`` and ``get``, in order."""

    def __getattr__(self, name: str) -> Any:
        if name in self._hide:
            raise AttributeError(name)
        attr = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in ("get", "multi_get"):
                self.read += [args[0]] if name == "get" else list(args[0])
            return attr(*args, **kwargs)

        return call if callable(attr) else attr


@pytest.fixture
def server() -> Iterator[Any]:
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )  # fmt: skip
    yield store
    del store


def _client(server: Any, hide: tuple[str, ...] = ()) -> Counting:
    client = dist.TCPStore(
        "127.0.0.1", server.port, is_master=False, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )  # fmt: skip
    client.set_timeout(datetime.timedelta(seconds=OP_TIMEOUT_S))  # as HangStore sets it
    return Counting(client, hide)


def _publish(
    server: Any, ranks: list[int], job: str = "job", unstated: int = -1, at: float | None = None
) -> dict[int, HangStore]:
    """Each of ``ranks`` states its step, then stalls: its record, written at ``at`` (now),
    brings its stalled state (``unstated`` publishes a record as its first word)."""
    shared = _client(server)  # one connection for all the simulated ranks
    stores = {}
    for rank in ranks:
        store = stores[rank] = HangStore(job, rank, client=shared)
        if rank == unstated:
            assert store.publish_record({"rank": rank, "time": time.time(), "step": 7}, now=99.0)
            assert server.check([state_key(job, rank)])
        assert store.publish_state(7, stalled=False, now=100.0)
        written = time.time() if at is None else at
        record = {"rank": rank, "time": written, "step": 7, "path": "/x"}
        assert store.publish_record(record, now=100.5)
        assert not store.publish_state(7, stalled=True, now=101.0)  # the record said it
        assert store.publish_record(record, now=101.0)  # a repeat: listed once all the same
    return stores


def test_fetch_reads_every_published_rank_in_one_multi_get(server: Any) -> None:
    _publish(server, [1, 2, 3, 5, 6, 7], unstated=7)  # rank 4 published nothing
    rank0 = _client(server)
    store = HangStore("job", 0, client=rank0)
    started = time.monotonic()
    found = store.fetch(range(8))
    took = time.monotonic() - started
    assert sorted(found) == [1, 2, 3, 5, 6, 7]
    assert all(r["via"] == "store" and r["last_state"]["stalled"] for r in found.values())
    assert all(
        r["last_seen"] == r["last_state"]["time"] and "path" not in r for r in found.values()
    )
    # the list of ranks (check, get), then one check and one multi_get for all their keys
    assert rank0.calls == Counter(check=2, get=1, multi_get=1)
    assert took < OP_TIMEOUT_S / 2  # the absent rank 4 was never waited for
    assert store.usable
    assert server.get(ranks_key("job")).count(b"1,") == 1

    rank0.calls.clear()
    assert sorted(store.states([1, 2, 3])) == [1, 2, 3]
    assert rank0.calls == Counter(check=1, multi_get=1)
    assert store.fetch([1], newer_than=time.time() + 60) == {}


def test_an_absent_rank_or_key_never_makes_rank_0_wait(server: Any) -> None:
    """Nothing published, a rank that is not listed, a listed rank whose state key is gone:
    answered at once, the store still in use."""
    rank0 = _client(server)
    store = HangStore("job", 0, client=rank0)
    started = time.monotonic()
    assert store.fetch([1, 2]) == {} and store.states([1, 2]) == {}
    _publish(server, [1, 2])
    assert sorted(store.fetch([1, 2, 3])) == [1, 2]
    server.delete_key(state_key("job", 2))  # listed, but its state is gone: key by key
    rank0.calls.clear()
    found = store.fetch([1, 2, 3])
    assert sorted(found) == [1, 2] and "last_seen" not in found[2] and "last_seen" in found[1]
    assert rank0.calls["multi_get"] == 0 and rank0.calls["get"] >= 3
    assert sorted(store.states([1, 2, 3])) == [1]
    assert time.monotonic() - started < OP_TIMEOUT_S / 2
    assert store.usable


def test_a_store_without_multi_get_is_read_key_by_key(server: Any) -> None:
    """An older torch (no ``multi_get``/``multi_set``/``append``): set and read key by key."""
    old = ("multi_get", "multi_set", "append")
    writer = HangStore("job", 1, client=_client(server, old))
    assert writer.publish_state(3, stalled=True, now=10.0)
    assert writer.publish_record({"rank": 1, "time": time.time(), "step": 3}, now=10.0)
    assert not server.check([ranks_key("job")])
    rank0 = _client(server, old)
    store = HangStore("job", 0, client=rank0)
    found = store.fetch([1, 2])
    assert list(found) == [1] and found[1]["last_state"]["step"] == 3
    assert rank0.calls == Counter(check=3, get=2)
    assert list(store.states([1, 2])) == [1]
    held = {1: found[1]["time"]}
    rank0.calls.clear()
    rank0.read.clear()
    records, states = store.sync([1, 2], held)  # rank 1 held: its state only
    assert records == {} and list(states) == [1] and rank0.read == [state_key("job", 1)]
    assert rank0.calls == Counter(check=2, get=1)


def _records(stores: dict[int, HangStore], at: float) -> None:
    """Each of ``stores``' ranks stalls again: a new record, written at ``at``."""
    for rank, store in stores.items():
        assert store.publish_state(8, stalled=False, now=200.0)  # resolved
        assert store.publish_record({"rank": rank, "time": at, "step": 8}, now=201.0)


def test_sync_reads_the_states_of_held_records_and_a_record_only_when_it_changed(
    server: Any,
) -> None:
    """Rank 0 holds every record: one check and one multi_get of their states, no record;
    with a rank that never published, the list too (it is not in it); a rank that stalled
    again (its state names a newer record) sends that record only."""
    now = time.time()
    stores = _publish(server, [1, 2, 3], at=now)
    rank0 = _client(server)
    store = HangStore("job", 0, client=rank0)
    found = store.fetch(range(4))
    held = {rank: record["time"] for rank, record in found.items()}
    assert held == {1: now, 2: now, 3: now}
    assert all(r["last_state"]["record_time"] == now for r in found.values())

    rank0.calls.clear()
    rank0.read.clear()
    records, states = store.sync([1, 2, 3], held)
    assert records == {} and sorted(states) == [1, 2, 3]
    assert rank0.calls == Counter(check=1, multi_get=1)
    assert rank0.read == [state_key("job", r) for r in (1, 2, 3)]

    rank0.calls.clear()
    rank0.read.clear()
    records, states = store.sync(range(5), held)  # rank 4 never published
    assert records == {} and sorted(states) == [1, 2, 3]
    assert rank0.calls == Counter(check=2, get=1, multi_get=1)  # the list, then the states
    assert rank0.read == [ranks_key("job")] + [state_key("job", r) for r in (1, 2, 3)]

    _records({3: stores[3]}, now + 1)
    rank0.calls.clear()
    rank0.read.clear()
    records, states = store.sync(range(5), held)
    assert list(records) == [3] and records[3]["time"] == now + 1 and records[3]["step"] == 8
    assert records[3]["last_state"]["record_time"] == now + 1 == states[3]["record_time"]
    assert rank0.read[-1] == hang_key("job", 3) and rank0.calls["multi_get"] == 2
    assert store.usable


def test_a_record_of_an_earlier_stall_is_read_once_then_only_its_state(server: Any) -> None:
    """A listed rank whose record predates this stall (``newer_than``) is left out, and from
    then on only its state is read, until it names a record of this stall."""
    now = time.time()
    stores = _publish(server, [1, 2], at=now - 600)
    rank0 = _client(server)
    store = HangStore("job", 0, client=rank0)
    assert store.fetch([1, 2], newer_than=now - 1) == {}
    rank0.read.clear()
    records, states = store.sync([1, 2], {}, newer_than=now - 1)
    assert records == {} and sorted(states) == [1, 2]
    assert rank0.read == [state_key("job", 1), state_key("job", 2)]  # no list, no record
    _records({2: stores[2]}, now)
    records, _ = store.sync([1, 2], {}, newer_than=now - 1)
    assert list(records) == [2] and records[2]["time"] == now


def test_sync_key_by_key_reads_held_ranks_states_only(server: Any) -> None:
    """An older torch: a held rank costs a check and a get of its state, one that published
    nothing a check of its record."""
    old = ("multi_get", "multi_set", "append")
    writer = HangStore("job", 1, client=_client(server, old))
    record = {"rank": 1, "time": time.time(), "step": 3}
    assert writer.publish_record(record, now=10.0)
    rank0 = _client(server, old)
    store = HangStore("job", 0, client=rank0)
    records, states = store.sync([1, 2], {1: record["time"]})
    assert records == {} and states[1]["record_time"] == record["time"]
    assert rank0.calls == Counter(check=2, get=1) and rank0.read == [state_key("job", 1)]


def test_the_watchdog_copies_each_record_once_while_a_rank_is_missing(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's watchdog, stalled, with rank 1's record in the store and rank 2's missing:
    rank 1's record is downloaded once (while merging), then every sync reads the list and
    the states only, and refreshes the copy's last_seen; when rank 1's state names a newer
    record, that record is copied again; when rank 1's stall resolves, its copy's last_state
    says so at once, and the copy is stale."""
    monkeypatch.setattr(watchdog_module, "_STORE_SYNC_S", 0.0)
    rank0 = _client(server)
    watched = ClockedWatchdog(
        tmp_path, seconds=1, world_size=3, store=HangStore("job", 0, client=rank0)
    )
    dog, clock, step = watched.dog, watched.clock, watched.step
    for _ in range(3):
        step[0] += 1
        clock[0] += 0.5
        dog.check()
    rank1 = _publish(server, [1])[1]
    clock[0] += 2.0
    dog.check()  # fires; merges for 2 s, rank 2 never comes
    assert dog.verdict is not None and dog.verdict.missing == [2]
    copy = orjson.loads((tmp_path / "hang-rank1.json").read_bytes())
    assert copy["via"] == "store" and copy["last_state"]["stalled"]
    for _ in range(3):
        clock[0] += 1.0
        dog.check()  # a late sync each time
    assert rank0.read.count(hang_key("job", 1)) == 1
    assert rank0.read.count(ranks_key("job")) > 3 and state_key("job", 2) not in rank0.read

    assert rank1.publish_state(7, stalled=True, now=107.0)  # its heartbeat
    clock[0] += 1.0
    dog.check()
    seen = orjson.loads((tmp_path / "hang-rank1.json").read_bytes())["last_seen"]
    assert seen > copy["last_seen"] and rank0.read.count(hang_key("job", 1)) == 1

    _records({1: rank1}, time.time())  # rank 1 stalled again: a newer record
    clock[0] += 1.0
    dog.check()
    again = orjson.loads((tmp_path / "hang-rank1.json").read_bytes())
    assert again["step"] == 8 and again["time"] > copy["time"]
    assert rank0.read.count(hang_key("job", 1)) == 2

    assert rank1.publish_state(9, stalled=False, now=201.1)  # resolved: at once, not in 30 s
    clock[0] += 1.0
    dog.check()
    copied = read_records(tmp_path)[1]
    assert copied["last_state"]["step"] == 9 and not copied["last_state"]["stalled"]
    currency = judge(tmp_path, {1: copied})  # the copy is stale: its rank went on
    assert not currency.current and currency.stale_reason is not None
    assert currency.stale_reason.startswith("training went on after the stall on rank 1's node")
