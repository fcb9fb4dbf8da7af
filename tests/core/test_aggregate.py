"""Window aggregation: statistics per window, and writers fed per step or per window."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon
from conftest import local_config
from trainmon.core.aggregate import WindowAggregator
from trainmon.core.events import StepScalars


def test_statistics_match_independent_computation() -> None:
    """count/mean/min/max/last per window equal those computed directly from the values."""
    values = [math.sin(s) * 10 for s in range(1, 101)]
    aggregator = WindowAggregator(25)
    windows = aggregator.add(
        [StepScalars(s, float(s), {"x": values[s - 1]}) for s in range(1, 101)]
    )
    windows.append(aggregator.close())  # type: ignore[arg-type]
    assert [(w.first_step, w.last_step) for w in windows] == [
        (1, 25),
        (26, 50),
        (51, 75),
        (76, 100),
    ]
    for k, window in enumerate(windows):
        chunk = values[k * 25 : (k + 1) * 25]
        stats = window.metrics["x"]
        assert stats.count == 25
        assert stats.mean == statistics.fmean(chunk) or math.isclose(
            stats.mean, statistics.fmean(chunk)
        )
        assert (stats.min, stats.max, stats.last) == (min(chunk), max(chunk), chunk[-1])


def test_non_finite_values_poison_the_mean_only() -> None:
    """A NaN makes the window mean NaN but min/max stay over the finite values."""
    aggregator = WindowAggregator(10)
    aggregator.add(
        [StepScalars(s, 0.0, {"loss": math.nan if s == 5 else float(s)}) for s in range(1, 11)]
    )
    window = aggregator.close_if_complete(0.0)
    assert window is not None
    stats = window.metrics["loss"]
    assert math.isnan(stats.mean) and (stats.min, stats.max, stats.count) == (1.0, 10.0, 10)


def test_all_non_finite_window_reports_last_value() -> None:
    """A window whose only values are Inf reports Inf, not a made-up number."""
    aggregator = WindowAggregator(10)
    aggregator.add([StepScalars(1, 0.0, {"x": math.inf})])
    window = aggregator.close()
    assert window is not None and window.metrics["x"].min == math.inf


def test_late_values_of_a_closed_step_join_the_next_window() -> None:
    """Values for step 50 arriving after its window closed do not make a one-step window."""
    aggregator = WindowAggregator(50)
    aggregator.add([StepScalars(s, 0.0, {"x": 1.0}) for s in range(1, 51)])
    assert aggregator.close_if_complete(0.0) is not None
    assert aggregator.add([StepScalars(50, 0.0, {"y": 2.0})]) == []
    # the background drains between the two calls: the late values alone close nothing, or
    # ranks whose drains fall differently would close different numbers of windows
    assert aggregator.close_if_complete(0.0) is None
    assert aggregator.add([StepScalars(s, 0.0, {"x": 1.0}) for s in range(51, 101)]) == []
    window = aggregator.close_if_complete(0.0)
    assert window is not None and (window.first_step, window.last_step) == (50, 100)


def test_time_windows() -> None:
    """With window_seconds, a window closes when a record arrives after the span."""
    aggregator = WindowAggregator(10, window_seconds=2.0)
    closed = aggregator.add([StepScalars(s, s * 0.5, {"x": float(s)}) for s in range(10)])
    assert [(w.first_step, w.last_step) for w in closed] == [(0, 3), (4, 7)]


def test_journal_holds_window_records_after_their_steps(tmp_path: Path) -> None:
    """The JSONL journal has one window line per 50 steps, after that window's step lines."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(1, 121):
            monitor.write_events([("train/loss", float(step), step)])
    records = list(trainmon.read_journal(tmp_path / "job"))
    windows = [r for r in records if r["kind"] == "window"]
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(1, 50), (51, 100), (101, 120)]
    assert windows[0]["stats"]["train/loss"] == {
        "count": 50,
        "mean": 25.5,
        "min": 1.0,
        "max": 50.0,
        "last": 50.0,
    }
    order = [(r["kind"], r.get("step", r.get("last_step"))) for r in records[1:]]
    assert order.index(("window", 50)) == order.index(("scalars", 50)) + 1


def test_window_writers_get_window_means(tmp_path: Path) -> None:
    """A TensorBoard writer set to ``every: window`` gets one mean per window at its last step."""
    config = local_config(tmp_path, steps_per_print=10)
    config["tensorboard"]["every"] = "window"
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 31):
            monitor.write_events([("train/loss", float(step), step)])
    acc = EventAccumulator(str(tmp_path / "tb" / "job"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [
        (10, 5.5),
        (20, 15.5),
        (30, 25.5),
    ]
    rows = (tmp_path / "csv" / "job" / "train_loss.csv").read_text().splitlines()
    assert len(rows) == 31  # CSV still takes every step


def test_console_prints_at_window_ends(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """With steps_per_print 50, the console prints at steps 50 and 100 on stdout."""
    config = local_config(tmp_path)
    config["console"] = {"enabled": True}
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 101):
            monitor.write_events([("train/loss", 1.0, step)])
    out = capsys.readouterr().out.splitlines()
    assert out == ["step 50 | loss 1", "step 100 | loss 1"]


def test_long_windows_fold_without_changing_the_statistics() -> None:
    """A window longer than the in-memory fold size gives the same count/mean/min/max/last."""
    values = [math.cos(s) * s for s in range(1, 3001)]
    aggregator = WindowAggregator(5000)
    aggregator.add([StepScalars(s, 0.0, {"x": values[s - 1], "n": s}) for s in range(1, 3001)])
    window = aggregator.close()
    assert window is not None
    x, n = window.metrics["x"], window.metrics["n"]
    assert (x.count, x.min, x.max, x.last) == (3000, min(values), max(values), values[-1])
    assert math.isclose(x.mean, statistics.fmean(values), rel_tol=1e-12, abs_tol=1e-9)
    assert (n.count, n.min, n.max, n.last, n.mean) == (3000, 1, 3000, 3000, 1500.5)
    aggregator.add(
        [StepScalars(s, 0.0, {"y": math.inf if s == 10 else 1.0}) for s in range(1, 3001)]
    )
    window = aggregator.close()
    assert window is not None
    y = window.metrics["y"]
    assert (y.count, y.min, y.max, y.mean) == (3000, 1.0, 1.0, math.inf)


def test_names_that_come_go_and_change_order_keep_each_metrics_values_in_step_order() -> None:
    """Records with other names, or the same names in another order, than the step before
    (an eval metric every few steps, a dict built in another order) still give each metric
    its own values in step order: count, mean, min, max, last and the first-seen order."""
    records = []
    for step in range(1, 2501):  # beyond the fold size: kept runs are folded on the way
        values: dict[str, float] = {"loss": math.sin(step), "lr": step * 1e-6}
        if step % 7 == 0:
            values["eval/acc"] = step / 10
        if step % 3 == 0:
            values = dict(reversed(values.items()))
        records.append(StepScalars(step, float(step), values))
    for window_steps in (10, 5000):
        aggregator = WindowAggregator(window_steps)
        windows = aggregator.add(records)
        last = aggregator.close()
        assert last is not None
        windows.append(last)
        for window in windows:
            inside = [r for r in records if window.first_step <= r.step <= window.last_step]
            expected_order = list(dict.fromkeys(n for r in inside for n in r.values))
            assert list(window.metrics) == expected_order
            for name, stats in window.metrics.items():
                column = [r.values[name] for r in inside if name in r.values]
                assert (stats.count, stats.min, stats.max, stats.last) == (
                    len(column),
                    min(column),
                    max(column),
                    column[-1],
                )
                assert math.isclose(stats.mean, statistics.fmean(column), rel_tol=1e-12)
