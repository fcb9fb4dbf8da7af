"""The hang verdict at many ranks, simulated in one process: what ``trainmon hang`` reads, how
long it takes and how much memory, and how long its verdict is, for 8 to 4,096 ranks.

Why: a hang at 1,024 ranks is when the verdict matters most and when a tool that prints a line
per rank, or reads megabytes per rank, stops being usable. Each rank's record is synthetic
but shaped as the stall watchdog writes it (12 frames kept, a collective), one file per rank
in one folder (the shared-folder layout); one rank is behind in its data loader, one went
quiet 40 s before the others, the rest wait in the same all_reduce. ``trainmon hang`` runs as
users call it (the CLI's entry point, in this process, its output captured), and the window
aggregation across ranks at the same sizes is ``bench_scale.py``'s (its local share table).

Then the job's store (``--store-ranks``, 1,024 by default): a real ``torch.distributed.TCPStore``
server on 127.0.0.1 (a free port) in this process, ``--clients`` real clients (64) connected to
it through a byte-counting TCP proxy, and one :class:`~trainmon.alerts.hang_store.HangStore` per
simulated rank, rank ``r`` on client ``r % clients`` (a real rank has a connection of its own;
the bytes of each operation are the same). Each client counts its operations. Measured, per
rank: connecting, its first state, steady state (steps every ``--step-s`` seconds, no stall,
over ``--steady-s`` simulated seconds: the state goes out at most every ``STEADY_STATE_S``),
the stall firing (record and state once), the stall going on (the state's refresh every 5 s);
and rank 0's reads of the others' records (``fetch``: the first copy), of their states only
while it holds every record and one rank of the job never published (``sync``: its read every
5 s of the stall) and of their states (``states``), in one ``multi_get`` and key by key (a
client that hides ``multi_get``, as an older torch has none), with their times over a direct
connection (no proxy), in interleaved rounds.

Run: ``.venv/bin/python benchmarks/bench_hang_scale.py [--ranks 8 64 1024 4096]
[--store-ranks 1024] [--clients 64] [--step-s 0.5 10] [--steady-s 300] [--only verdict|store]
[--json out.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import io
import json
import socket
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import harness
from trainmon.alerts.hang import write_record
from trainmon.alerts.hang_store import HEARTBEAT_S, OP_TIMEOUT_S, STEADY_STATE_S, HangStore
from trainmon.cli import main as cli

INTERVAL_S = HEARTBEAT_S
"""The interval traffic is given per: the stalled state's refresh, and rank 0's store sync."""


def record(rank: int, world: int, now: float) -> dict[str, Any]:
    """One rank's record with 12 frames, as the watchdog keeps them."""
    frames = [
        {"function": f"frame_{i}", "file": f"/opt/venv/lib/python3.11/site-packages/lib{i}.py",
         "line": 100 + i, "kind": "library"}
        for i in range(11)
    ]  # fmt: skip
    behind = rank == 17
    frames.insert(
        0,
        {"function": "load_batch" if behind else "all_reduce",
         "file": "data.py" if behind else "torch/distributed/distributed_c10d.py",
         "line": 40, "kind": "user" if behind else "library"},
    )  # fmt: skip
    return {
        "rank": rank,
        "world_size": world,
        "step": 811 if behind else 812,
        "time": now - (40.0 if rank == world - 1 else 0.0),
        "stalled_since": now - 600,
        "host": f"node{rank // 8:04d}",
        "pid": 10_000 + rank,
        "thread": "MainThread",
        "job": "bench",
        "collective": {"op": "all_reduce", "seq": 811 if behind else 812,
                       "inside": not behind, "group": None},
        "frames": frames,
    }  # fmt: skip


def measure(world: int) -> dict[str, Any]:
    """Write ``world`` records, then time ``trainmon hang`` on them (and its peak memory)."""
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="trainmon-hang-") as folder:
        for rank in range(world):
            write_record(Path(folder), record(rank, world, now))
        size = sum(p.stat().st_size for p in Path(folder).iterdir())
        out = io.StringIO()
        tracemalloc.start()
        began = time.perf_counter()
        with contextlib.redirect_stdout(out):
            assert cli(["hang", folder]) == 0
        seconds = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    lines = out.getvalue().splitlines()
    return {
        "ranks": world,
        "bytes_read": size,
        "seconds": seconds,
        "peak_mb": peak / 1e6,
        "verdict_chars": len(lines[0]),
        "output_lines": len(lines),
        "verdict": lines[0],
    }


# ---- the job's store ---------------------------------------------------------------------------


class CountingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``port`` that counts the bytes each way."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.bytes = {"up": 0, "down": 0}  # up: clients to the store, down: back
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for sock in (conn, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst, way in ((conn, upstream, "up"), (upstream, conn, "down")):
                threading.Thread(target=self._pump, args=(src, dst, way), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                break
            if not data:
                break
            with self._lock:
                self.bytes[way] += len(data)
            try:
                dst.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def settled(self) -> dict[str, int]:
        """The counts once nothing moved for 0.1 s (``set`` does not wait for an answer)."""
        last: dict[str, int] = {}
        while True:
            with self._lock:
                now = dict(self.bytes)
            if now == last:
                return now
            last = now
            time.sleep(0.1)

    def close(self) -> None:
        self._listener.close()


class Counting:
    """A store client that counts its operations; ``hide`` names methods it pretends to lack."""

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


OLD_TORCH = ("multi_get", "multi_set", "append")
"""What a client hides to be read key by key."""


def _client(port: int, hide: tuple[str, ...] = ()) -> Counting:
    dist: Any = importlib.import_module("torch.distributed")

    client = dist.TCPStore(
        "127.0.0.1", port, is_master=False, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )  # fmt: skip
    client.set_timeout(datetime.timedelta(seconds=max(OP_TIMEOUT_S, 30.0)))
    return Counting(client, hide)


class Traffic:
    """Bytes (through the proxy) and operations (of ``clients``) since the last ``take``."""

    def __init__(self, proxy: CountingProxy, clients: list[Counting]) -> None:
        self.proxy, self.clients = proxy, clients
        self._bytes = proxy.settled()
        self._ops = self._count()

    def _count(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for client in self.clients:
            total.update(client.calls)
        return total

    def take(self) -> dict[str, Any]:
        now, ops = self.proxy.settled(), self._count()
        taken = {
            "up": now["up"] - self._bytes["up"],
            "down": now["down"] - self._bytes["down"],
            "ops": dict(ops - self._ops),
        }
        self._bytes, self._ops = now, ops
        return taken


def _per_rank(taken: dict[str, Any], ranks: int, scale: float = 1.0) -> dict[str, Any]:
    """A phase's traffic per rank (times ``scale``: per interval from a longer window)."""
    ops = sum(taken["ops"].values())
    return {
        "ops": ops * scale / ranks,
        "ops_by_kind": {k: v * scale / ranks for k, v in sorted(taken["ops"].items())},
        "bytes_up": taken["up"] * scale / ranks,
        "bytes_down": taken["down"] * scale / ranks,
    }


READS = ("fetch", "sync", "states")


def _read(
    store: HangStore, what: str, world: int, held: dict[int, float]
) -> dict[int, dict[str, Any]]:
    """Rank 0's ``fetch`` of every other rank's record; its ``sync`` holding ``held`` (every
    other rank's record), rank ``world`` of the job missing (it never published: the list is
    read too): the states, no record; or its ``states`` of them. The states of ``sync``."""
    if what == "fetch":
        return store.fetch(range(world))
    if what == "sync":
        records, states = store.sync(range(world + 1), held)
        assert records == {}, sorted(records)[:5]
        return states
    return store.states(range(1, world))


def _time_reads(
    stores: dict[str, HangStore], world: int, held: dict[int, float], repeats: int
) -> dict[str, list[float]]:
    """Seconds of each read (``"<fetch|states>, <way>"`` on its store), ``repeats`` rounds,
    the reads in a fresh random order each round (after one untimed round)."""
    times: dict[str, list[float]] = {name: [] for name in stores}

    def run(name: str, _round: int, recorded: bool) -> None:
        began = time.perf_counter()
        _read(stores[name], name.split(",")[0], world, held)
        if recorded:
            times[name].append(time.perf_counter() - began)

    harness.interleaved_rounds(list(stores), repeats, run, warmup_rounds=1)
    return times


def measure_store(
    world: int,
    n_clients: int,
    step_times: list[float],
    window_s: float,
    repeats: int,
    steady_s: float = 10 * STEADY_STATE_S,
) -> dict[str, Any]:
    """Store traffic per rank in each phase, and rank 0's reads, at ``world`` ranks."""
    dist: Any = importlib.import_module("torch.distributed")

    server = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )  # fmt: skip
    proxy = CountingProxy(server.port)
    try:
        traffic = Traffic(proxy, [])
        clients = [_client(proxy.port) for _ in range(n_clients)]
        traffic.clients = clients
        phases: dict[str, dict[str, Any]] = {}
        phases["connect (once, per connection)"] = _per_rank(traffic.take(), n_clients)
        ranks = [HangStore("bench", r, client=clients[r % n_clients]) for r in range(world)]
        per_interval = INTERVAL_S / window_s

        # the first state: set at once when the watchdog first sees a step
        t, step = 1000.0, 100
        for store in ranks:
            store.publish_state(step, stalled=False, now=t)
        phases["its first state (once)"] = _per_rank(traffic.take(), world)
        # steady state: every rank steps every step_s for steady_s (simulated clock)
        for step_s in step_times:
            began = t
            while t < began + steady_s:
                t, step = t + step_s, step + 1
                for store in ranks:
                    store.publish_state(step, stalled=False, now=t)
            phases[f"steady, a step every {step_s:g} s (per {INTERVAL_S:g} s)"] = _per_rank(
                traffic.take(), world, INTERVAL_S / steady_s
            )
        # the stall fires: each rank's record, with its stalled state (as the watchdog does)
        wall = time.time()
        for rank, store in enumerate(ranks):
            store.publish_record(record(rank, world, wall), now=t)
            store.publish_state(step, stalled=True, now=t)  # said with the record: nothing
        phases["the stall fires (once)"] = _per_rank(traffic.take(), world)
        held = {rank: float(record(rank, world, wall)["time"]) for rank in range(1, world)}
        # the stall goes on: the watchdog looks every second, the state is refreshed every 5 s
        stalled_from = t
        while t < stalled_from + window_s:
            t += 1.0
            for store in ranks:
                store.publish_state(step, stalled=True, now=t)
        phases[f"stalled (per {INTERVAL_S:g} s)"] = _per_rank(traffic.take(), world, per_interval)

        # rank 0's reads: bytes and operations through the proxy, times over a direct client
        reads: dict[str, dict[str, Any]] = {}
        direct: dict[str, HangStore] = {}
        for way, hide in (("multi_get", ()), ("key by key", OLD_TORCH)):
            counted = _client(proxy.port, hide)
            rank0 = HangStore("bench", 0, client=counted)
            for what in READS:
                reading = Traffic(proxy, [counted])
                got = _read(rank0, what, world, held)
                taken = reading.take()
                assert len(got) == world - 1, (way, what, len(got))
                reads[f"{what}, {way}"] = {
                    "ranks_read": len(got),
                    "ops": sum(taken["ops"].values()),
                    "ops_by_kind": taken["ops"],
                    "bytes_up": taken["up"],
                    "bytes_down": taken["down"],
                }
                direct[f"{what}, {way}"] = HangStore("bench", 0, client=_client(server.port, hide))
        for name, times in _time_reads(direct, world, held, repeats).items():
            reads[name]["seconds"] = statistics.median(times)
            reads[name]["seconds_min"] = min(times)
            reads[name]["seconds_all"] = times
    finally:
        proxy.close()
        del server
    return {
        "ranks": world,
        "clients": n_clients,
        "step_s": step_times,
        "window_s": window_s,
        "steady_s": steady_s,
        "steady_state_s": STEADY_STATE_S,
        "interval_s": INTERVAL_S,
        "per_rank": phases,
        "rank0_reads": reads,
    }


def _size(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{n:.0f} B"


def print_store(result: dict[str, Any]) -> None:
    world = result["ranks"]
    print(
        f"\nthe job's store at {world:,} ranks ({result['clients']} real TCPStore clients, "
        f"rank r on client r % {result['clients']}; bytes on the wire through a proxy)"
    )
    rows = []
    for phase, r in result["per_rank"].items():
        kinds = ", ".join(f"{v:.3g} {k}" for k, v in r["ops_by_kind"].items()) or "none"
        total = r["bytes_up"] + r["bytes_down"]
        rows.append([
            phase, f"{r['ops']:.3g} ({kinds})", _size(r["bytes_up"]), _size(r["bytes_down"]),
            f"{r['ops'] * world:,.0f} ops, {_size(total * world)}",
        ])  # fmt: skip
    harness.print_markdown_table(
        ["per rank", "operations", "sent", "received", f"all {world:,} ranks"], rows
    )
    print()
    harness.print_markdown_table(
        [f"rank 0 reads {world - 1:,} ranks", "operations", "sent", "received", "median (min)"],
        [
            [
                what,
                f"{r['ops']:,}",
                _size(r["bytes_up"]),
                _size(r["bytes_down"]),
                f"{r['seconds'] * 1e3:.1f} ms ({r['seconds_min'] * 1e3:.1f})",
            ]
            for what, r in result["rank0_reads"].items()
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 1024, 4096])
    parser.add_argument("--store-ranks", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument(
        "--step-s", type=float, nargs="+", default=[0.5, 10.0], help="step times, steady state"
    )
    parser.add_argument(
        "--window-s", type=float, default=60.0, help="simulated time of the stall going on"
    )
    parser.add_argument(
        "--steady-s",
        type=float,
        default=10 * STEADY_STATE_S,
        help="simulated time of each steady-state phase",
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds of rank 0's reads")
    parser.add_argument("--only", choices=["verdict", "store"])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    info = harness.machine_info(("trainmon", "torch"))
    print(harness.machine_line(info))
    out: dict[str, Any] = {"machine": info}
    if args.only != "verdict":
        out["store"] = measure_store(
            args.store_ranks, args.clients, args.step_s, args.window_s, args.repeats, args.steady_s
        )
        print_store(out["store"])
    if args.only != "store":
        out["verdict"] = print_verdicts(args.ranks)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


def print_verdicts(sizes: list[int]) -> list[dict[str, Any]]:
    """``trainmon hang`` at each size, as a table."""
    results = [measure(world) for world in sizes]
    harness.print_markdown_table(
        ["ranks", "read", "per rank", "time", "peak memory", "verdict", "output"],
        [
            [
                f"{r['ranks']:,}",
                f"{r['bytes_read'] / 1e6:.2f} MB",
                f"{r['bytes_read'] / r['ranks'] / 1e3:.2f} kB",
                f"{r['seconds'] * 1e3:.0f} ms",
                f"{r['peak_mb']:.1f} MB",
                f"{r['verdict_chars']} chars",
                f"{r['output_lines']} lines",
            ]
            for r in results
        ],
    )
    print(f"\nverdict at {results[-1]['ranks']:,} ranks:\n  {results[-1]['verdict']}")
    return results


if __name__ == "__main__":
    raise SystemExit(main())
