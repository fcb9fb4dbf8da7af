"""The comms logger: DeepSpeed's bandwidth formulas, what a run records per op and per step, the
summary table, prof_ops filtering, install/uninstall, and ``enabled: false`` meaning off."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port
from trainmon import Monitor, read_journal
from trainmon.collect.comms import (
    SUPPORTED_OPS,
    CommsLogger,
    bandwidth_gbps,
    convert_size,
    volume_factors,
)
from trainmon.config import CommsLoggerConfig
from trainmon.core.values import Deferred

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

WORKER = Path(__file__).parents[1] / "scripts" / "comms_worker.py"
KIB, MIB = 1024, 1024 * 1024
HEADER = (
    "Comm. Op            Message Size        Count               Total Latency(ms)   "
    "Avg Latency(ms)     tput_avg (Gbps)     busbw_avg (Gbps)"
)


# ---- formulas ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "size", "latency_ms", "n", "algbw", "busbw"),
    [
        # all_reduce: tput = 2*size/t; busbw = size/t * 2(n-1)/n; bytes/ms * 8 / 1e6 = Gbit/s
        ("all_reduce", MIB, 2.0, 4, 2 * MIB / 2.0 * 8e-6, MIB / 2.0 * 1.5 * 8e-6),
        # all_gather: size *= n; tput = size/t; busbw = tput * (n-1)/n
        ("all_gather", 1000, 1.0, 8, 0.064, 0.056),
        ("all_gather_into_tensor", 1000, 1.0, 8, 0.064, 0.056),
        ("reduce_scatter", 1000, 1.0, 8, 0.064, 0.056),
        ("reduce_scatter_tensor", 1000, 1.0, 8, 0.064, 0.056),
        # all_to_all: tput = size/t; busbw = tput * (n-1)/n
        ("all_to_all_single", 4000, 0.5, 4, 0.064, 0.048),
        # broadcast, reduce, send, recv: busbw = tput = size/t
        ("broadcast", 10**6, 1.0, 16, 8.0, 8.0),
        ("reduce", 10**6, 1.0, 16, 8.0, 8.0),
        ("send", 10**6, 4.0, 2, 2.0, 2.0),
        ("recv", 10**6, 4.0, 2, 2.0, 2.0),
        ("barrier", 0, 0.3, 2, 0.0, 0.0),
    ],
)
def test_bandwidth_matches_deepspeed_formula_by_hand(
    op: str, size: int, latency_ms: float, n: int, algbw: float, busbw: float
) -> None:
    """algbw and busbw in Gbit/s are DeepSpeed's calc_bw_log values, computed here by hand."""
    assert bandwidth_gbps(op, size, latency_ms, n) == pytest.approx((algbw, busbw), rel=1e-12)


def test_bandwidth_edge_cases() -> None:
    """A zero latency gives zero bandwidth, one rank has no bus traffic, an unknown op is named."""
    assert bandwidth_gbps("all_reduce", MIB, 0.0, 2) == (0.0, 0.0)
    assert bandwidth_gbps("all_reduce", 10**6, 1.0, 1) == (16.0, 0.0)
    assert volume_factors("all_gather", 1) == (1.0, 0.0)
    with pytest.raises(ValueError, match="'all_reduce_coalesced'"):
        bandwidth_gbps("all_reduce_coalesced", 1, 1.0, 2)


def test_message_sizes_print_like_deepspeed() -> None:
    """Sizes in the summary read as DeepSpeed prints them: powers of 1024, two decimals."""
    assert [convert_size(s) for s in (0, 40, 1023, KIB, 1536, MIB, 3 * 1024**3)] == [
        "0B",
        "40.0 B",
        "1023.0 B",
        "1.0 KB",
        "1.5 KB",
        "1.0 MB",
        "3.0 GB",
    ]


# ---- one process: a world of one gloo rank ----------------------------------------------------


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A gloo process group of one rank in this process, on the loopback interface."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Monitor]:
    """A monitor writing only a JSONL journal under ``tmp_path/job``."""
    config = {
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "console": {"enabled": False},
    }
    with Monitor(config) as built:
        yield built


def make_logger(monitor: Monitor, **config: Any) -> CommsLogger:
    """A CommsLogger with ``enabled`` on unless said otherwise."""
    config.setdefault("enabled", True)
    return CommsLogger(CommsLoggerConfig(**config), monitor, record_stats=config["enabled"])


def test_install_wraps_every_op_and_uninstall_restores_them(
    one_rank: None, monitor: Monitor
) -> None:
    """install/uninstall are idempotent; wrappers keep name and signature; originals come back."""
    c10d = dist.distributed_c10d
    originals = {op: getattr(dist, op) for op in SUPPORTED_OPS}
    comms = make_logger(monitor)
    comms.install()
    comms.install()
    for op in SUPPORTED_OPS:
        wrapped = getattr(dist, op)
        assert wrapped is not originals[op] and getattr(c10d, op) is wrapped
        assert wrapped.__name__ == op
        assert inspect.signature(wrapped) == inspect.signature(originals[op])
    comms.uninstall()
    comms.uninstall()
    for op in SUPPORTED_OPS:
        assert getattr(dist, op) is originals[op] and getattr(c10d, op) is originals[op]
    dist.all_reduce(torch.ones(4))
    assert comms.take_step_comm_ms() == 0.0


def test_step_comm_ms_sums_the_step_and_resets(one_rank: None, monitor: Monitor) -> None:
    """take_step_comm_ms returns the step's collective time as a float, then starts over."""
    comms = make_logger(monitor)
    comms.install()
    try:
        dist.all_reduce(torch.ones(256))
        dist.broadcast(torch.ones(10), src=0)
        step_ms = comms.take_step_comm_ms()
        stats = comms.stats()
    finally:
        comms.uninstall()
    assert isinstance(step_ms, float) and step_ms > 0
    total = sum(row.total_latency_ms for by_size in stats.values() for row in by_size.values())
    assert step_ms == pytest.approx(total, rel=1e-12)
    assert {op: {s: r.count for s, r in by_size.items()} for op, by_size in stats.items()} == {
        "all_reduce": {KIB: 1},
        "broadcast": {40: 1},
    }
    assert comms.take_step_comm_ms() == 0.0


def test_async_op_is_timed_to_completion(one_rank: None, monitor: Monitor) -> None:
    """An async_op=True call is timed until its work completes, handed back as a Deferred."""
    comms = make_logger(monitor)
    comms.install()
    try:
        work = dist.all_reduce(torch.ones(KIB // 4), async_op=True)
        work.wait()
        step_ms = comms.take_step_comm_ms()
    finally:
        comms.uninstall()
    assert isinstance(step_ms, Deferred)
    resolved = step_ms.resolve()
    assert resolved is not None and resolved > 0
    assert comms.stats()["all_reduce"][KIB].total_latency_ms == pytest.approx(resolved)


def test_stats_mid_step_do_not_count_twice(one_rank: None, monitor: Monitor) -> None:
    """stats() in the middle of a step counts each call once, before and after the step ends."""
    comms = make_logger(monitor)
    comms.install()
    try:
        dist.all_reduce(torch.ones(256))
        assert comms.stats()["all_reduce"][KIB].count == 1
        dist.all_reduce(torch.ones(256))
        comms.take_step_comm_ms()
        monitor.flush()
        assert comms.stats()["all_reduce"][KIB].count == 2
    finally:
        comms.uninstall()


def test_failed_call_raises_as_before_and_is_not_recorded(one_rank: None, monitor: Monitor) -> None:
    """A collective that raises still raises the same error, and nothing is recorded for it."""
    comms = make_logger(monitor)
    comms.install()
    try:
        with pytest.raises((TypeError, RuntimeError, ValueError)) as wrapped_error:
            dist.broadcast(torch.ones(4), src=5)
    finally:
        comms.uninstall()
    with pytest.raises(type(wrapped_error.value)):
        dist.broadcast(torch.ones(4), src=5)
    assert comms.take_step_comm_ms() == 0.0
    assert comms.stats() == {}


def test_unknown_prof_op_is_reported(monitor: Monitor, trainmon_logs: list[Any]) -> None:
    """A prof_ops name that is not a wrapped collective is named in a warning."""
    make_logger(monitor, prof_all=False, prof_ops=["all_reduce", "allreduce"])
    messages = [record.getMessage() for record in trainmon_logs]
    assert any("'allreduce'" in m and "comms_logger.prof_ops" in m for m in messages)


def test_overhead_per_call_is_a_few_microseconds(
    one_rank: None, monitor: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrapping costs the calling thread a few microseconds per collective, measured around a
    collective that does nothing (a real one's own time varies more than that on a busy box)."""

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist.distributed_c10d, "all_reduce", all_reduce)
    tensor = torch.ones(256)
    comms = make_logger(monitor)

    def per_call_us(calls: int = 5000) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(tensor)
        elapsed = (time.perf_counter() - start) / calls * 1e6
        comms.take_step_comm_ms()  # what the engine does once per step
        return elapsed

    plain, wrapped = [], []
    for _ in range(10):  # interleaved, so that whatever else runs hits both alike
        plain.append(per_call_us())
        comms.install()
        try:
            wrapped.append(per_call_us())
        finally:
            comms.uninstall()
    overhead = min(wrapped) - min(plain)
    print(f"comms logger overhead per collective: {overhead:.2f} us")
    assert comms.stats()["all_reduce"][KIB].count == 10 * 5000
    assert overhead < 10.0


def test_record_stats_false_only_times_for_comm_ms(
    one_rank: None, monitor: Monitor, tmp_path: Path
) -> None:
    """record_stats=False still gives perf/comm_ms but keeps no statistics and writes no comm/;
    each blocking call is reported to the watcher (the phase clock) as it returns; a step with
    an async call adds the blocking calls' time to the async one's."""
    comms = CommsLogger(CommsLoggerConfig(enabled=True, verbose=True), monitor, record_stats=False)
    reported: list[float] = []
    comms.watch_host_comm(reported.append)
    comms.install()
    try:
        dist.all_reduce(torch.ones(256))
        dist.all_reduce(torch.ones(256))
        step_ms = comms.take_step_comm_ms()
        dist.all_reduce(torch.ones(256), async_op=True).wait()
        dist.all_reduce(torch.ones(256))
        mixed = comms.take_step_comm_ms()
        empty = comms.take_step_comm_ms()
    finally:
        comms.uninstall()
    monitor.close()
    assert len(reported) == 3  # the blocking calls only
    assert isinstance(step_ms, float) and step_ms > 0
    assert step_ms == pytest.approx(reported[0] + reported[1])
    mixed_ms = mixed.resolve() if isinstance(mixed, Deferred) else mixed
    assert mixed_ms > reported[2]  # the async call's time and the blocking one's
    assert empty == 0.0
    assert comms.stats() == {}
    kinds = {record["kind"] for record in read_journal(tmp_path / "job")}
    assert kinds - {"heartbeat"} == {"meta", "end"}  # the attempt's records, no values


def test_tensor_subclass_redispatch_is_recorded_once(one_rank: None, monitor: Monitor) -> None:
    """A tensor subclass whose __torch_function__ dispatches back to the op counts one call."""

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return super().__torch_function__(func, types, args, kwargs or {})

    comms = make_logger(monitor)
    comms.install()
    try:
        dist.all_reduce(torch.ones(256).as_subclass(Traced))
        comms.take_step_comm_ms()
    finally:
        comms.uninstall()
    assert comms.stats()["all_reduce"][KIB].count == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_collectives_are_timed_with_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """On NCCL, blocking and async calls are timed by device events resolved later."""
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with Monitor({"console": {"enabled": False}}) as built:
            comms = make_logger(built)
            comms.install()
            try:
                tensor = torch.ones(MIB // 4, device="cuda")
                dist.all_reduce(tensor)
                dist.all_reduce(tensor, async_op=True).wait()
                step_ms = comms.take_step_comm_ms()
            finally:
                comms.uninstall()
            assert isinstance(step_ms, Deferred)
            resolved = step_ms.resolve()
            assert resolved is not None and resolved > 0
            assert comms.stats()["all_reduce"][MIB].count == 2
    finally:
        dist.destroy_process_group()


# ---- two real ranks under torchrun ------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two gloo ranks run ``tests/scripts/comms_worker.py`` once; what they wrote, by rank."""
    out = tmp_path_factory.mktemp("comms")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(WORKER),
        str(out),
    ]
    # A session of its own, so that a hang can be ended with torchrun's workers included.
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"torchrun did not finish in 120 s:\n{stdout}\n{stderr}")
    if proc.returncode != 0:
        pytest.fail(f"torchrun failed (rc {proc.returncode}):\n{stdout}\n{stderr}")
    ranks = [json.loads((out / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    logs = [(out / f"log.rank-{r}.txt").read_text(encoding="utf-8") for r in (0, 1)]
    return {"out": out, "ranks": ranks, "logs": logs}


def counts(stats: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[int, tuple[int, int]]]:
    """op -> message size -> (count, total bytes)."""
    return {
        op: {int(size): (row["count"], row["total_bytes"]) for size, row in by_size.items()}
        for op, by_size in stats.items()
    }


def journal_steps(path: Path) -> dict[int, dict[str, float]]:
    """step -> values of the scalars records of a journal."""
    steps: dict[int, dict[str, float]] = {}
    for record in read_journal(path):
        if record["kind"] == "scalars":
            steps.setdefault(record["step"], {}).update(record["values"])
    return steps


@pytest.mark.slow
def test_counts_and_message_sizes_are_exact_on_every_rank(run: dict[str, Any]) -> None:
    """Each rank counts every call per op and message size; all_gather counts this rank's shard."""
    for result in run["ranks"]:
        assert result["world_size"] == 2
        assert counts(result["all"]["stats"]) == {
            "all_reduce": {KIB: (4, 4 * KIB), MIB: (3, 3 * MIB)},
            "all_gather": {KIB: (2, 2 * KIB)},
            "barrier": {0: (1, 0)},
        }


@pytest.mark.slow
def test_latency_is_positive_and_bandwidth_follows_the_formula(run: dict[str, Any]) -> None:
    """Every row has a positive latency and the algbw/busbw of DeepSpeed's formula at it."""
    for result in run["ranks"]:
        for op, by_size in result["all"]["stats"].items():
            for size, row in by_size.items():
                assert 0 < row["min_latency_ms"] <= row["max_latency_ms"]
                assert row["total_latency_ms"] == pytest.approx(
                    row["avg_latency_ms"] * row["count"]
                )
                expected = bandwidth_gbps(op, int(size), row["avg_latency_ms"], 2)
                assert (row["algbw_gbps"], row["busbw_gbps"]) == pytest.approx(expected, rel=1e-9)
        big = result["all"]["stats"]["all_reduce"][str(MIB)]
        assert big["busbw_gbps"] == pytest.approx(big["algbw_gbps"] / 2)  # 2(n-1)/n over 2


def cells(line: str) -> list[str]:
    """The seven 20-character columns of a summary row."""
    return [line[start : start + 20].strip() for start in range(0, 140, 20)]


@pytest.mark.slow
def test_summary_table_has_deepspeeds_layout(run: dict[str, Any]) -> None:
    """log_summary prints DeepSpeed's header, each op, then one row per message size."""
    lines = run["ranks"][0]["all"]["summary"].splitlines()
    assert cells(lines[0]) == [
        "Comm. Op",
        "Message Size",
        "Count",
        "Total Latency(ms)",
        "Avg Latency(ms)",
        "tput_avg (Gbps)",
        "busbw_avg (Gbps)",
    ]
    assert [line for line in lines[1:] if not line.startswith(" ")] == [
        "all_reduce",
        "all_gather",
        "barrier",
    ]
    rows = [cells(line) for line in lines[1:] if line.startswith(" ")]
    assert [row[:3] for row in rows] == [
        ["", "1.0 KB", "4"],
        ["", "1.0 MB", "3"],
        ["", "1.0 KB", "2"],
        ["", "0B", "1"],
    ]
    big = run["ranks"][0]["all"]["stats"]["all_reduce"][str(MIB)]
    assert rows[1][3:] == [
        f"{big['total_latency_ms']:.2f}",
        f"{big['avg_latency_ms']:.2f}",
        f"{big['algbw_gbps']:.2f}",
        f"{big['busbw_gbps']:.2f}",
    ]
    assert "communication summary" in run["logs"][0]
    assert "communication summary" not in run["logs"][1]


@pytest.mark.slow
def test_step_metrics_in_rank0_journal_match_the_calls(run: dict[str, Any]) -> None:
    """Rank 0's journal holds comm/<op>/count, bytes, latency_ms and busbw_gbps for each step."""
    journals = sorted(run["out"].glob("all/**/metrics.jsonl"))
    assert len(journals) == 1  # rank 1 writes nothing
    steps = journal_steps(journals[0])
    expected = {
        1: {"all_reduce": (5, 3 * KIB + 2 * MIB)},
        2: {"all_reduce": (1, KIB), "all_gather": (2, 2 * KIB), "barrier": (1, 0)},
        3: {"all_reduce": (1, MIB)},
    }
    assert sorted(steps) == [1, 2, 3]
    for step, ops in expected.items():
        values = steps[step]
        recorded = {name.split("/")[1] for name in values if name.startswith("comm/")}
        assert recorded == set(ops)
        for op, (count, nbytes) in ops.items():
            assert values[f"comm/{op}/count"] == count
            assert values[f"comm/{op}/bytes"] == nbytes
            latency = values[f"comm/{op}/latency_ms"]
            assert latency > 0
            busbw = bandwidth_gbps(op, nbytes, latency, 2)[1]
            assert values[f"comm/{op}/busbw_gbps"] == pytest.approx(busbw, rel=1e-9)
        step_ms = sum(v for name, v in values.items() if name.endswith("/latency_ms"))
        assert values["perf/comm_ms"] == pytest.approx(step_ms, rel=1e-9)
        assert values["perf/comm_ms"] == pytest.approx(run["ranks"][0]["all"]["comm_ms"][step - 1])


@pytest.mark.slow
def test_verbose_lines_come_from_rank0_with_the_caller(run: dict[str, Any]) -> None:
    """verbose logs DeepSpeed's line per call on rank 0; debug adds the calling function."""
    lines = [line for line in run["logs"][0].splitlines() if "comm op:" in line]
    assert len(lines) == 10  # the "all" phase only: "off" has verbose on but is disabled
    assert all(line.startswith("rank=0 | comm op: ") for line in lines)
    assert all("[Caller Func: run_steps_all]" in line for line in lines)
    assert sum("| msg size: 1.0 MB |" in line for line in lines) == 3
    assert all("| algbw (Gbps): " in line and "| busbw (Gbps): " in line for line in lines)
    assert "comm op:" not in run["logs"][1]


@pytest.mark.slow
def test_prof_ops_wraps_and_records_only_the_named_ops(run: dict[str, Any]) -> None:
    """With prof_all false and prof_ops ["all_reduce"], only all_reduce is wrapped and counted."""
    for result in run["ranks"]:
        phase = result["filtered"]
        assert [op for op, wrapped in phase["wrapped"].items() if wrapped] == ["all_reduce"]
        assert counts(phase["stats"]) == {"all_reduce": {KIB: (4, 4 * KIB)}}
        assert all(ms > 0 for ms in phase["comm_ms"])
    steps = journal_steps(run["out"] / "filtered" / "job")
    assert {name for values in steps.values() for name in values if name.startswith("comm/")} == {
        f"comm/all_reduce/{field}" for field in ("count", "bytes", "latency_ms", "busbw_gbps")
    }


@pytest.mark.slow
def test_uninstall_restores_the_original_functions(run: dict[str, Any]) -> None:
    """After uninstall, torch.distributed and distributed_c10d hold the original functions."""
    for result in run["ranks"]:
        assert all(result["all"]["wrapped"].values())
        assert [result[phase]["restored"] for phase in ("all", "filtered", "off")] == [True] * 3


@pytest.mark.slow
def test_enabled_false_records_nothing(run: dict[str, Any]) -> None:
    """enabled: false keeps no statistics, writes no comm/ metric and logs no line per call;
    collectives are still timed for perf/comm_ms."""
    for result in run["ranks"]:
        phase = result["off"]
        assert phase["stats"] == {}
        assert phase["summary"] == HEADER
        assert all(ms > 0 for ms in phase["comm_ms"])
    steps = journal_steps(run["out"] / "off" / "job")
    names = {name for values in steps.values() for name in values}
    assert names == {"perf/comm_ms"}


def test_a_collective_inside_a_phase_counts_in_comm_only(
    one_rank: None, monitor: Monitor, tmp_path: Path
) -> None:
    """The breakdown's comms logger reports each collective to the step's clock: a 30 ms
    all_reduce run inside the forward (ZeRO's gathers) leaves perf/forward_ms and shows in
    perf/comm_ms; the parts still fit in the step."""
    from trainmon.collect.instrument import StepInstrument

    class Slow(torch.Tensor):  # a collective that takes 30 ms (one rank's all_reduce is instant)
        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if getattr(func, "__name__", "") == "all_reduce":
                time.sleep(0.03)
            return super().__torch_function__(func, types, args, kwargs or {})

    instrument = StepInstrument(monitor, breakdown=True)
    try:
        for _ in range(3):
            instrument.forward_begin()
            time.sleep(0.01)
            dist.all_reduce(torch.ones(4).as_subclass(Slow))
            instrument.forward_end()
            instrument.optimizer_begin()
            time.sleep(0.005)
            instrument.optimizer_end()
            instrument.step_end()
    finally:
        instrument.close()
    monitor.close()
    steps = {
        record["step"]: record["values"]
        for record in read_journal(tmp_path / "job")
        if record["kind"] == "scalars"
    }
    for step in (2, 3):
        values = steps[step]
        assert 10.0 <= values["perf/forward_ms"] < 35.0, values  # 10 ms, not 40
        assert values["perf/comm_ms"] >= 30.0, values
        parts = sum(values[f"perf/{p}_ms"] for p in ("forward", "optimizer", "comm", "data"))
        assert parts <= values["perf/step_time_ms"] * 1.05 + 1.0, values
