"""Rank 0 reads the other ranks' hang records from a real TCPStore on loopback in one
``multi_get``, and never waits for a rank that published nothing."""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from trainmon.alerts.hang_store import OP_TIMEOUT_S, HangStore, ranks_key, state_key

dist = pytest.importorskip("torch.distributed")


class Counting:
    """A store client that counts its operations; ``hide`` names methods it pretends to lack
    (an older torch)."""

    def __init__(self, store: Any, hide: tuple[str, ...] = ()) -> None:
        self._store = store
        self._hide = set(hide)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if name in self._hide:
            raise AttributeError(name)
        attr = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
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


def _publish(server: Any, ranks: list[int], job: str = "job", unstated: int = -1) -> None:
    """Each of ``ranks`` states its step, then stalls: its record and its stalled state
    (``unstated`` publishes its record first: the record brings a state with it)."""
    shared = _client(server)  # one connection for all the simulated ranks
    for rank in ranks:
        store = HangStore(job, rank, client=shared)
        if rank == unstated:
            assert store.publish_record({"rank": rank, "time": time.time(), "step": 7})
            assert server.check([state_key(job, rank)])
        assert store.publish_state(7, stalled=False, now=100.0)
        record = {"rank": rank, "time": time.time(), "step": 7, "path": "/x"}
        assert store.publish_record(record)
        assert store.publish_state(7, stalled=True, now=100.5)
        assert store.publish_record(record)  # a repeat: listed once all the same


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
    assert writer.publish_record({"rank": 1, "time": time.time(), "step": 3})
    assert not server.check([ranks_key("job")])
    rank0 = _client(server, old)
    store = HangStore("job", 0, client=rank0)
    found = store.fetch([1, 2])
    assert list(found) == [1] and found[1]["last_state"]["step"] == 3
    assert rank0.calls == Counter(check=3, get=2)
    assert list(store.states([1, 2])) == [1]
