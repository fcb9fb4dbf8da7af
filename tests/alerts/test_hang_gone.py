"""Gone ranks (their node or torchrun agent stopped) named as gone, not as waiting or behind;
records copied from the job's store judged by their own node's state, not the journal beside
them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from alert_helpers import ClockedWatchdog

from trainmon.alerts import watchdog as watchdog_module
from trainmon.alerts.hang import (
    GONE_AFTER_S,
    dead_processes,
    diagnose,
    gone_ranks,
    read_records,
    write_record,
)
from trainmon.alerts.hang_store import HEARTBEAT_S, STEADY_STATE_S, HangStore
from trainmon.report.hang_currency import judge

HOST = socket.gethostname()


def _record(rank: int, step: int, when: float, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "rank": rank,
        "world_size": 2,
        "host": HOST,
        "pid": 1000 + rank,
        "time": when,
        "step": step,
        "collective": None,
        "frames": [{"function": "load", "file": "data.py", "line": 9, "kind": "user"}],
    }
    record.update(extra)
    return record


def _inside(rank: int, when: float, **extra: Any) -> dict[str, Any]:
    collective = {"op": "all_reduce", "seq": 4, "group": "world", "inside": True}
    return _record(rank, 3, when, collective=collective, **extra)


def _from_store(rank: int, when: float, seen: float, **state: Any) -> dict[str, Any]:
    last_state = {"step": 3, "time": seen, "host": f"node{rank}", "pid": 7, "stalled": True}
    last_state.update(state)
    return _record(
        rank, 3, when, host=f"node{rank}", via="store", last_seen=seen, last_state=last_state
    )


def test_a_rank_whose_state_stopped_refreshing_is_gone_not_behind() -> None:
    """Rank 1's last_seen fell 40 s behind rank 0's: named as gone with its host, and not as
    a rank behind; within GONE_AFTER_S it is still where it was."""
    now = time.time()
    records = {0: _inside(0, now - 50, last_seen=now), 1: _from_store(1, now - 50, now - 40)}
    verdict = diagnose(records)
    assert verdict.line == (
        "rank 0 waits in all_reduce #4; rank 1 (host node1): gone — no sign of life for 40 s "
        "(its node/agent stopped)"
    )
    assert verdict.gone == [1] and verdict.behind == [] and verdict.as_dict()["gone"] == [1]
    records[1] = _from_store(1, now - 50, now - GONE_AFTER_S + 2)  # a heartbeat or two late
    verdict = diagnose(records)
    assert verdict.gone == [] and "rank 1 is at step 3 in load (data.py:9)" in verdict.line


def test_a_rank_that_stepped_on_is_not_gone_and_a_lone_record_is_never_gone() -> None:
    """A state that says the rank steps again promises no heartbeat: not gone. With no other
    rank's last_seen to compare with, nobody is gone."""
    now = time.time()
    stepping = _from_store(1, now - 50, now - 30, stalled=False, step=9)
    assert gone_ranks({0: _inside(0, now - 50, last_seen=now), 1: stepping}) == {}
    before = _from_store(1, now - 50, now - 51, stalled=False)  # its state predates its record
    assert list(gone_ranks({0: _inside(0, now - 50, last_seen=now), 1: before})) == [1]
    assert gone_ranks({1: _from_store(1, now - 50, now - 40)}) == {}
    assert gone_ranks({0: _inside(0, now), 1: _from_store(1, now, now - 40)}) == {}


def test_a_node_of_ranks_gone_is_one_part_per_host() -> None:
    """Eight ranks of one host gone: one part with their ranks as a range and their host."""
    now = time.time()
    records = {r: _inside(r, now - 50, last_seen=now) for r in range(8)}
    records.update({r: _from_store(r, now - 50, now - 31 - r % 3) for r in range(8, 16)})
    for rank in range(8, 16):
        records[rank]["host"] = "gpu-b7"
    line = diagnose(records, 16).line
    assert line == (
        "ranks 0, 1, 2, 3, 4, 5, 6, 7 wait in all_reduce #4; ranks 8, 9, 10, 11, 12, 13, 14, 15 "
        "(host gpu-b7): gone — no sign of life for 33 s (their node/agent stopped)"
    )


def test_a_process_known_dead_is_gone_while_another_runs() -> None:
    """On this host: a rank whose pid ended, while this (running) process is another rank's,
    is gone; when every process ended (the job is over), or on another host, nobody is."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    now = time.time()
    records = {
        0: _inside(0, now, pid=os.getpid()),  # written after this process started
        1: _record(1, 3, now - 20, pid=ended.pid, last_seen=now - 12),
    }
    dead = dead_processes(records, now)
    assert list(dead) == [1] and dead[1] == pytest.approx(12.0)
    line = diagnose(records, dead=dead).line
    assert line.endswith(
        f"rank 1 (host {HOST}): gone — no sign of life for 12 s (its process ended)"
    )
    assert dead_processes({1: records[1]}, now) == {}  # no process of the job runs here
    assert dead_processes(records, now, host="elsewhere") == {}
    reused = {0: records[0], 1: _record(1, 3, now - 3600, pid=os.getpid())}
    assert list(dead_processes(reused, now)) == [1]  # that pid now names a later process


class Recorder:
    """A store client with ``set`` only (key by key): what a rank sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def set(self, key: str, value: bytes) -> None:
        self.sent.append((key, orjson.loads(value)))

    def states(self) -> list[tuple[Any, bool]]:
        return [(v["step"], v["stalled"]) for k, v in self.sent if k.startswith("trainmon/state")]


def test_publishing_a_stall_or_its_end_is_not_held_back_by_the_steady_limit() -> None:
    """While steps come the state is set at most every STEADY_STATE_S; the state that says
    "stalled" goes out at once (a node killed right after its stall fired still shows as
    stalled: it owed heartbeats), and so does the one that says the stall resolved (a record
    copied from the store is stale from then on: its rank's state is past its step)."""
    client = Recorder()
    store = HangStore("job", 1, client=client)
    assert store.publish_state(3, stalled=False, now=10.0)  # the first: at once
    assert not store.publish_state(4, stalled=False, now=10.5)  # steps: held back
    assert store.publish_state(4, stalled=True, now=10.6)  # the stall: at once
    assert store.publish_state(5, stalled=False, now=10.7)  # resolved: at once
    assert not store.publish_state(6, stalled=False, now=11.0)
    assert client.states() == [(3, False), (4, True), (5, False)]


# ---- the merging rank keeps the signs of life fresh --------------------------------------------


class FakeStore:
    """The job's store as rank 0 sees it: rank 1's record, and its state (frozen: gone)."""

    usable = True

    def __init__(self, seen: float) -> None:
        self.seen = seen
        self.state_reads = 0

    def publish_state(self, step: int, *, stalled: bool, now: float | None = None) -> bool:
        return True

    def publish_record(self, record: dict[str, Any], *, now: float | None = None) -> bool:
        return True

    def _state(self) -> dict[str, Any]:
        return {"step": 3, "time": self.seen, "host": "node1", "pid": 7, "stalled": True}

    def sync(
        self, ranks: Any, held: Any, *, newer_than: float | None = None
    ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
        if 1 not in ranks:
            return {}, {}
        self.state_reads += 1
        if 1 in held:  # its copy is held: only the state comes
            return {}, {1: self._state()}
        record = _inside(1, time.time(), host="node1", pid=7)
        record["collective"] = None
        copy = {**record, "via": "store", "last_seen": self.seen, "last_state": self._state()}
        return {1: copy}, {1: self._state()}


def test_the_merging_rank_refreshes_last_seen_and_names_the_gone_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While stalled, rank 0 refreshes its own record's last_seen and the copy of rank 1's
    (from its frozen state in the store): its verdict names rank 1 as gone, and the records in
    its folder say so once the job is over."""
    monkeypatch.setattr(watchdog_module, "_STORE_SYNC_S", 0.0)
    store = FakeStore(seen=time.time() - 60)
    watched = ClockedWatchdog(tmp_path, seconds=5, world_size=2, store=store)
    dog, clock, step = watched.dog, watched.clock, watched.step
    for _ in range(3):
        step[0] += 1
        clock[0] += 1.0
        dog.check()
    clock[0] += 6.0
    dog.check()  # fires: rank 1's record comes from the store
    assert dog.verdict is not None and (tmp_path / "hang-rank1.json").is_file()
    dog.check()  # still stalled: the signs of life are refreshed
    assert store.state_reads >= 1
    assert dog.verdict is not None and dog.verdict.gone == [1], dog.verdict
    assert "rank 1 (host node1): gone — no sign of life for 6" in dog.verdict.line
    records = read_records(tmp_path)
    assert records[0]["last_seen"] > time.time() - 5 and records[1]["last_seen"] == store.seen
    assert diagnose(records).gone == [1]  # from the files alone, after the job


# ---- judged by its own node's state ------------------------------------------------------------


def _journal(run: Path, start: float, steps: range, step_at: float, end: bool = False) -> None:
    lines = [{"v": 1, "kind": "meta", "time": start, "job": "job", "rank": 0, "world_size": 2,
              "pid": 1000, "host": HOST}]  # fmt: skip
    lines += [
        {"v": 1, "kind": "scalars", "step": s, "time": step_at, "values": {"x": 1.0}} for s in steps
    ]
    if end:
        lines.append({"v": 1, "kind": "end", "time": step_at + 1, "step": steps[-1],
                      "status": "failed"})  # fmt: skip
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def test_a_record_from_the_store_is_not_judged_by_rank_zeros_steps(tmp_path: Path) -> None:
    """Rank 0's journal went on to step 10 after rank 1's record (copied from the store) was
    written: that is rank 0's progress, not rank 1's, so rank 1's record stays current; rank
    1's own state in the store past its step makes it stale."""
    now = time.time()
    run = tmp_path / "job"
    _journal(run, now - 100, range(1, 11), now - 10)
    stuck = _from_store(1, now - 50, now - 5)
    write_record(run, stuck)
    currency = judge(run, read_records(run), now)
    assert currency.current and currency.left_out == {}
    write_record(run, _from_store(1, now - 50, now - 5, step=7, stalled=False))
    currency = judge(run, read_records(run), now)
    assert not currency.current
    assert currency.stale_reason is not None
    assert currency.stale_reason.startswith(
        "training went on after the stall on rank 1's node: its state in the job's store was "
        "at step 7"
    )
    assert currency.since[0]["what"] == "resumed" and currency.since[0]["step"] == 7


def test_a_record_from_the_store_follows_the_jobs_attempts_and_end(tmp_path: Path) -> None:
    """What happens to the whole job still counts: a later attempt, and the run's end."""
    now = time.time()
    run = tmp_path / "job"
    write_record(run, _from_store(1, now - 50, now - 45))
    _journal(run, now - 100, range(1, 4), now - 60, end=True)
    currency = judge(run, read_records(run), now)
    assert not currency.current and currency.stale_reason is not None
    assert "the run ended" in currency.stale_reason
    _journal(run, now - 20, range(1, 4), now - 10)  # a new attempt after the record
    currency = judge(run, read_records(run), now)
    assert currency.stale_reason is not None
    assert currency.stale_reason.startswith("these records predate a later attempt")


def test_a_stepping_rank_sets_its_state_seldom_its_stall_and_its_end_at_once(
    tmp_path: Path,
) -> None:
    """Through the watchdog (its clock): two minutes of steps every 0.5 s set the state 4
    times (at most every STEADY_STATE_S); the stall sets the record and its stalled state
    (naming the record) at once, then a heartbeat every HEARTBEAT_S; the first step after it
    sets the resolved state at once, past the record's step."""
    client = Recorder()
    watched = ClockedWatchdog(
        tmp_path, seconds=5, world_size=1, store=HangStore("job", 0, client=client)
    )
    dog, clock, step = watched.dog, watched.clock, watched.step

    def run(seconds: float, every: float, stepping: bool) -> None:
        end = clock[0] + seconds
        while clock[0] < end:
            clock[0] += every
            step[0] += stepping
            dog.check()

    run(120.0, 0.5, stepping=True)
    steady = client.states()
    assert len(steady) == 4 == 120 // STEADY_STATE_S  # not 240: one per step
    assert [s for s, _ in steady] == [1, 61, 121, 181] and not any(x for _, x in steady)
    stalled_at = step[0]
    client.sent.clear()
    run(20.0, 1.0, stepping=False)  # fires after 5 s, then 15 s of stall
    # the step it reached, due 30 s after the last state; then the stall, at once
    assert [key.split("/")[1] for key, _ in client.sent[:3]] == ["state", "hang", "state"]
    record, state = client.sent[1][1], client.sent[2][1]
    assert state["record_time"] == record["time"] and state["step"] == record["step"]
    heartbeats = int(15 // HEARTBEAT_S)
    assert client.states() == [(stalled_at, False)] + [(stalled_at, True)] * (1 + heartbeats)
    client.sent.clear()
    run(2.0, 1.0, stepping=True)
    assert client.states() == [(stalled_at + 1, False)]  # resolved: at once, then held back
    assert client.sent[0][1]["record_time"] == record["time"]
