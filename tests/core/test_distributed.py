"""Many ranks, real processes: who writes, per-rank folders, and statistics across ranks."""

from __future__ import annotations

import csv
import io
import logging
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import trainmon
from conftest import free_port, printed_objects, torchrun
from trainmon.core.cross_rank import REDUCED_METRICS, summarise_ranks
from trainmon.logging import configure_logging, log_dist, rank_file

SCRIPTS = Path(__file__).parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
from ranks_worker import values  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_only_rank_zero_writes_by_default(tmp_path: Path, nproc: int) -> None:
    """Under torchrun, exactly one journal and one CSV folder exist, written by rank 0."""
    torchrun(SCRIPTS / "ranks_worker.py", nproc, str(tmp_path), "default")
    journals = sorted(tmp_path.rglob("metrics.jsonl"))
    assert journals == [tmp_path / "job" / "metrics.jsonl"]
    meta = next(trainmon.read_journal(journals[0]))
    assert (meta["rank"], meta["world_size"]) == (0, nproc)
    assert not any(p.name.startswith("rank-") for p in tmp_path.rglob("*"))


@pytest.mark.slow
def test_log_rank_last_writes_from_the_last_rank(tmp_path: Path) -> None:
    """With trainmon.log_rank "last" on 2 ranks, rank 1 alone writes, with its own values, and
    the cross-rank statistics are gathered there."""
    result = torchrun(SCRIPTS / "ranks_worker.py", 2, str(tmp_path), "last_rank")
    printed = sorted(
        printed_objects(result.stdout),
        key=lambda row: row["rank"],
    )
    assert [row["rank"] for row in printed] == [0, 1]
    assert printed[0]["writers"] == []
    assert {"jsonl", "csv"} <= set(printed[1]["writers"])
    journals = sorted(tmp_path.rglob("metrics.jsonl"))
    assert journals == [tmp_path / "job" / "metrics.jsonl"]
    records = list(trainmon.read_journal(journals[0]))
    assert (records[0]["rank"], records[0]["world_size"]) == (1, 2)
    logged = [r for r in records if r["kind"] == "scalars" and "train/loss" in r["values"]]
    assert [r["step"] for r in logged] == list(range(1, 41))
    for record in logged:
        mine = values(1, record["step"])
        assert {k: record["values"][k] for k in mine} == mine
    windows = [r for r in records if r["kind"] == "window"]
    assert [w["last_step"] for w in windows] == [10, 20, 30, 40]
    for window in windows:
        stats = window["stats"]
        assert stats["mem/rss_mb/min"]["last"] == 100.0  # rank 0's value, gathered on rank 1
        assert stats["mem/rss_mb/max"]["last"] == 101.0
        assert stats["mem/rss_mb/argmax_rank"]["last"] == 1
    with (tmp_path / "csv" / "job" / "mem_rss_mb.csv").open() as f:
        rows = list(csv.reader(f))
    assert [float(v) for v in rows[1]] == [1.0, 101.0]  # step 1, rank 1's value


@pytest.mark.slow
def test_per_rank_output_gives_one_folder_per_rank(tmp_path: Path) -> None:
    """With per_rank_output each rank writes its own rank-<r> folder with its own values."""
    torchrun(SCRIPTS / "ranks_worker.py", 2, str(tmp_path), "per_rank")
    for rank in range(2):
        folder = tmp_path / "job" / f"rank-{rank}"
        records = [r for r in trainmon.read_journal(folder) if r["kind"] == "scalars"]
        assert [r["step"] for r in records] == list(range(1, 41))
        assert records[0]["values"]["mem/rss_mb"] == 100.0 + rank
        assert (tmp_path / "csv" / "job" / f"rank-{rank}" / "train_loss.csv").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_cross_rank_statistics_match_independent_computation(tmp_path: Path, nproc: int) -> None:
    """Rank 0's windows carry min/mean/max/argmax across ranks, the job's summed throughput,
    and rank 1 (least time waiting in collectives) as the slowest, all as computed here."""
    result = torchrun(SCRIPTS / "ranks_worker.py", nproc, str(tmp_path), "cross_rank")
    windows = [r for r in trainmon.read_journal(tmp_path / "job") if r["kind"] == "window"]
    assert [w["last_step"] for w in windows] == [10, 20, 30, 40]
    for window in windows:
        steps = range(window["first_step"], window["last_step"] + 1)
        per_rank = {
            name: [statistics.fmean(values(r, s)[name] for s in steps) for r in range(nproc)]
            for name in ("perf/step_time_ms", "perf/comm_ms")
        }
        # rank r does 1 + r samples per step, and every rank's steps take the same time
        seconds = sum(values(0, s)["perf/step_time_ms"] for s in steps) / 1e3
        samples = [(1 + r) * len(steps) for r in range(nproc)]
        per_rank["perf/samples_per_sec"] = [n / seconds for n in samples]
        stats = window["stats"]
        for name, column in per_rank.items():
            assert stats[f"{name}/min"]["last"] == pytest.approx(min(column))
            assert stats[f"{name}/mean"]["last"] == pytest.approx(statistics.fmean(column))
            assert stats[f"{name}/max"]["last"] == pytest.approx(max(column))
        assert stats["perf/job_samples_per_sec"]["last"] == pytest.approx(sum(samples) / seconds)
        assert stats["mem/rss_mb/argmax_rank"]["last"] == nproc - 1
        busy = [
            t - c
            for t, c in zip(per_rank["perf/step_time_ms"], per_rank["perf/comm_ms"], strict=True)
        ]
        assert stats["perf/slowest_rank"]["last"] == 1
        assert stats["perf/straggler_ratio"]["last"] == pytest.approx(
            max(busy) / statistics.median_low(busy)
        )
        assert stats["perf/straggler_ratio"]["last"] > 1.5
    assert "slowest rank 1" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_engine_reports_the_straggler(tmp_path: Path, nproc: int) -> None:
    """With trainmon.initialize under torchrun, a rank that sleeps 50 ms per step is the slowest,
    with a straggler ratio above 1.5, and rank 0's console line names it."""
    result = torchrun(SCRIPTS / "engine_worker.py", nproc, str(tmp_path), "1", timeout=180)
    windows = [r for r in trainmon.read_journal(tmp_path / "job") if r["kind"] == "window"]
    assert [w["last_step"] for w in windows] == [10, 20, 30]
    for window in windows[1:]:  # the first window includes start-up
        stats = window["stats"]
        assert stats["perf/slowest_rank"]["last"] == 1
        assert stats["perf/straggler_ratio"]["last"] > 1.5
        assert stats["perf/comm_ms/max"]["last"] > 30  # the fast ranks wait for rank 1
        assert stats["perf/job_samples_per_sec"]["last"] == pytest.approx(  # ranks in step
            stats["perf/samples_per_sec/mean"]["last"] * nproc, rel=0.05
        )
    assert "slowest rank 1" in result.stdout


@pytest.mark.slow
def test_job_rate_is_all_samples_over_the_wall_time(tmp_path: Path) -> None:
    """Two ranks under trainmon.initialize whose steps take 10 ms and 190 ms in turn: rank 0's
    windows and console line give the job's samples/s within 10% of the samples counted (both
    ranks') over the wall time the ranks measured, not a sum of means of per-step rates."""
    result = torchrun(SCRIPTS / "rates_worker.py", 2, str(tmp_path), timeout=180)
    reports = printed_objects(result.stdout)
    assert len(reports) == 2
    truth = []
    for end in (9, 19):  # windows of 10 steps: each rank's wall time, the slowest's counts
        begin = [r["start"] if end == 9 else r["ends"][end - 10] for r in reports]
        elapsed = max(r["ends"][end] - b for r, b in zip(reports, begin, strict=True))
        truth.append(2 * 16 * 10 / elapsed)
    assert truth[0] == pytest.approx(160 * 2, rel=0.15)  # the sleeps are what the test says
    windows = [r for r in trainmon.read_journal(tmp_path / "job") if r["kind"] == "window"]
    job = [w["stats"]["perf/job_samples_per_sec"]["last"] for w in windows]
    assert job == pytest.approx(truth, rel=0.1)
    shown = [float(x) for x in re.findall(r"samples/s \(job (\S+)\)", result.stdout)]
    assert shown == pytest.approx(truth, rel=0.1)


@pytest.mark.slow
def test_a_hung_rank_does_not_hang_the_others(tmp_path: Path) -> None:
    """When rank 1 stops logging, rank 0's monitoring collective gives up after its timeout with
    a clear error, rank 0's loop runs at full speed, and every step still reaches the journal."""
    result = torchrun(SCRIPTS / "ranks_worker.py", 2, str(tmp_path), "hang")
    reports = printed_objects(result.stdout)
    rank0 = next(r for r in reports if r["rank"] == 0)
    assert rank0["loop_s"] < 2.5  # 40 steps of 10 ms; not held up by the 3 s timeout
    assert "cross-rank statistics stopped" in result.stderr
    steps = [r["step"] for r in trainmon.read_journal(tmp_path / "job") if r["kind"] == "scalars"]
    assert sorted(set(steps)) == list(range(1, 41))


def test_summarise_ranks_skips_metrics_no_rank_has() -> None:
    """Metrics no rank has produce nothing; ranks without a metric are left out of its min/max."""
    nan = float("nan")
    width = len(REDUCED_METRICS) + 3  # last step, busy time, the metrics, elapsed time
    rows = [[10.0, 5.0] + [nan] * (width - 2), [10.0, 15.0] + [nan] * (width - 2)]
    rows[0][2], rows[1][2] = 20.0, nan  # step time only on rank 0
    out = summarise_ranks(rows)
    assert out["perf/step_time_ms/max"] == 20.0 and out["perf/step_time_ms/argmax_rank"] == 0
    assert not any(k.startswith("perf/forward_ms") for k in out)
    assert out["perf/slowest_rank"] == 1 and out["perf/straggler_ratio"] == pytest.approx(3.0)


def test_single_process_has_no_cross_rank_metrics(tmp_path: Path) -> None:
    """Without torch.distributed the windows hold only the local statistics."""
    config = {
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "j"},
        "console": {"enabled": False},
        "steps_per_print": 5,
        "trainmon": {"cross_rank": "on"},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 6):
            monitor.log({"perf/step_time_ms": 10.0}, step=step)
    window = next(r for r in trainmon.read_journal(tmp_path / "j") if r["kind"] == "window")
    assert set(window["stats"]) == {"perf/step_time_ms"}


def test_log_dist_and_configure_logging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """log_dist logs only on the chosen ranks, with a [Rank r] prefix, to a per-rank file if asked,
    and the root logger is left alone."""
    root_handlers = list(logging.getLogger().handlers)
    stream = io.StringIO()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    try:
        configure_logging(
            level="INFO", file=tmp_path / "train.log", per_rank_file=True, stream=stream
        )
        log_dist("only on rank 0", ranks=[0])
        log_dist("on rank 1", ranks=[1])
        log_dist("everywhere", ranks=None)
        trainmon.logging.get_logger().debug("hidden at INFO")
    finally:
        configure_logging(stream=sys.stderr)
    printed = stream.getvalue().splitlines()
    assert printed == ["[trainmon] [Rank 1] INFO on rank 1", "[trainmon] [Rank 1] INFO everywhere"]
    assert (tmp_path / "train.rank-1.log").read_text().splitlines() == printed
    assert logging.getLogger().handlers == root_handlers
    assert rank_file("logs/{rank}/run.log", 3) == Path("logs/3/run.log")


def test_configure_logging_ranks_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure_logging(ranks=[0]) silences every other rank's library messages."""
    stream = io.StringIO()
    monkeypatch.setenv("RANK", "2")
    try:
        configure_logging(stream=stream, ranks=[0])
        trainmon.logging.get_logger().warning("from rank 2")
    finally:
        configure_logging(stream=sys.stderr)
    assert stream.getvalue() == ""
    with pytest.raises(ValueError, match="level 'loud' is not a logging level name"):
        configure_logging(level="loud")


def test_windows_of_late_values_are_not_gathered() -> None:
    """A window holding only late values of the last gathered step is not gathered (other ranks
    may have folded those values into the earlier window, so gathering it would desync them)."""
    import torch.distributed as dist

    from trainmon.core.aggregate import WindowAggregator
    from trainmon.core.cross_rank import CrossRankReducer
    from trainmon.core.events import StepScalars

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        reducer = CrossRankReducer(10.0)
        aggregator = WindowAggregator(5)
        first = aggregator.add([StepScalars(s, 0.0, {"perf/step_time_ms": 2.0}) for s in (1, 5)])
        first.append(aggregator.close_if_complete(0.0))  # type: ignore[arg-type]
        assert reducer(first[-1]) is not None
        aggregator.add([StepScalars(5, 0.0, {"eval/loss": 1.0})])  # logged after the step
        late = aggregator.close()
        assert late is not None and late.last_step == 5
        assert reducer(late) is None
        aggregator.add([StepScalars(6, 0.0, {"perf/step_time_ms": 2.0})])
        assert reducer(aggregator.close()) is not None  # type: ignore[arg-type]
        reducer.close()
    finally:
        dist.destroy_process_group()


_RELEASE_SCRIPT = """
import json, sys
from pathlib import Path
import torch
import torch.distributed as dist
import trainmon

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
import torch.distributed.nn.functional as F  # after init: its defaults hold the default group

model = torch.nn.Linear(4, 1)
if sys.argv[2] == "engine":
    config = {"train_micro_batch_size_per_gpu": 2, "console": {"enabled": False},
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}
    engine, _, _, _ = trainmon.initialize(model=model, config=config)
    engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
    engine.step()
    engine.close()
else:  # the user's own loop and optimizer, with a bare Monitor
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    monitor = trainmon.Monitor({"console": {"enabled": False}})
    model(torch.randn(2, 4)).pow(2).mean().backward()
    optimizer.step()
    monitor.log({"train/loss": 1.0}, step=1)
    monitor.close()
summed = F.all_reduce(torch.ones(2)).tolist()  # a default of None is still the default group
dist.destroy_process_group()
names = [(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()]
print(json.dumps({"summed": summed, "threads": names}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names come from /proc")
@pytest.mark.parametrize("closing", ["engine", "monitor"])
def test_destroy_process_group_frees_gloo_after_trainmon_closes(
    tmp_path: Path, closing: str
) -> None:
    """A module of torch imported after init_process_group holds the default group in its
    default arguments; once the engine (or a bare Monitor) closed, destroy_process_group still
    frees the group (no gloo thread is left for interpreter exit) and those functions still
    use it."""
    script = tmp_path / "release.py"
    script.write_text(_RELEASE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(trainmon.__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, str(script), str(free_port()), closing],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = printed_objects(done.stdout)[-1]
    assert report["summed"] == [1.0, 1.0]
    assert [name for name in report["threads"] if "gloo" in name] == []
