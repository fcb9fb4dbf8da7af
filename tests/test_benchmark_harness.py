"""The benchmarks' shared harness measures what its names say (sleeps of known length, a real
worker subprocess, round orders counted here)."""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_harness", BENCHMARKS / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


def test_time_calls_measures_wall_and_not_cpu_of_a_sleep() -> None:
    befores: list[int] = []
    timings = harness.time_calls(
        lambda: time.sleep(0.02), 3, warmup=1, before=lambda: befores.append(1)
    )
    assert len(timings.wall_ns) == len(timings.thread_ns) == len(timings.process_ns) == 3
    assert len(befores) == 4  # before runs ahead of warm-up calls too, untimed
    for wall, cpu in zip(timings.wall_ns, timings.thread_ns, strict=True):
        assert 0.019 <= wall / 1e9 < 1.0, wall
        assert cpu / 1e9 < 0.01, cpu  # sleeping uses no CPU


def test_per_call_us_is_mean_per_call_per_round_and_between_is_untimed() -> None:
    rounds = harness.per_call_us(
        lambda _i: time.sleep(0.005), 4, 2, between=lambda: time.sleep(0.2)
    )
    assert len(rounds) == 2
    for us in rounds:
        assert 5_000 <= us < 40_000, us  # the 200 ms between rounds (+50 ms per call) is not in it


def test_interleaved_rounds_orders_and_warmup() -> None:
    seen: list[tuple[str, int, bool]] = []
    harness.interleaved_rounds(
        ["a", "b", "c"],
        2,
        lambda c, i, r: seen.append((c, i, r)),
        order="alternate",
        warmup_rounds=1,
    )
    assert [c for c, _, _ in seen] == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [r for _, _, r in seen] == [False] * 3 + [True] * 6

    orders: list[list[str]] = [[], []]
    harness.interleaved_rounds(
        list("abcdef"), 2, lambda c, i, r: orders[i].append(c), rng=random.Random(3)
    )
    assert all(sorted(o) == list("abcdef") for o in orders)
    expected = list("abcdef")
    rng = random.Random(3)
    rng.shuffle(expected)
    assert orders[0] == expected  # the same seeded shuffle a script got before


def test_balanced_order_has_each_contender_follow_each_other_equally_often() -> None:
    """Over whole cycles of recorded rounds every permutation runs once: within rounds, each
    contender comes right after each other one the same number of times."""
    rounds: dict[int, list[str]] = {}
    harness.interleaved_rounds(
        ["bare", "twin", "attach"],
        12,  # two cycles of the 3! permutations
        lambda c, i, r: rounds.setdefault(i, []).append(c) if r else None,
        order="balanced",
        rng=random.Random(5),
        warmup_rounds=1,
    )
    recorded = list(rounds.values())
    assert len(recorded) == 12 and all(sorted(o) == ["attach", "bare", "twin"] for o in recorded)
    assert Counter(tuple(o) for o in recorded) == Counter(
        {order: 2 for order in itertools.permutations(["bare", "twin", "attach"])}
    )
    follows = Counter(pair for o in recorded for pair in itertools.pairwise(o))
    assert set(follows.values()) == {4} and len(follows) == 6


def test_percentile_interpolates_and_paired_overhead_brackets_the_estimate() -> None:
    assert harness.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert harness.percentile([], 0.5) != harness.percentile([], 0.5)  # NaN
    estimate, (low, high) = harness.paired_overhead(
        [1.1, 1.2, 1.1, 1.15], [1.0, 1.0, 1.0, 1.0], random.Random(0), 500
    )
    assert estimate == pytest.approx(0.125)
    assert low <= estimate <= high


def test_run_worker_round_trip_and_error(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "import harness\n"
        "if sys.argv[1] == 'fail':\n"
        "    raise SystemExit('broken on purpose')\n"
        "print('noise')\n"
        "harness.emit_result({'echo': sys.argv[1:]})\n",
        encoding="utf-8",
    )
    result = harness.run_worker(script, ["x", "y"])
    assert result["echo"] == ["x", "y"]
    assert "other_load_pct" in result
    failed = harness.run_worker(script, ["fail"])
    assert "broken on purpose" in failed["error"], failed


def test_tables_print_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    harness.print_markdown_table(
        ("name", "µs"), [("a", "1.0"), ("long name", "10.5"), ("x", "gone")]
    )
    harness.print_columns([("case", -6), ("µs", 5)], [("a", harness.fmt(1.23456))])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| name      | µs   |"
    assert out[3] == "| long name | 10.5 |"
    assert out[4] == "| x         | gone |"  # a note line: not padded to the column
    assert out[-1] == "a      1.235"
    assert harness.fmt(float("nan")) == "-" and harness.fmt(1234.5) == "1,234"


def test_per_call_us_numbers_calls_from_first() -> None:
    seen: list[int] = []
    harness.per_call_us(seen.append, 3, 2, first=10)
    assert seen == [10, 11, 12, 10, 11, 12]


def test_paired_difference_is_median_of_differences_with_interval() -> None:
    estimate, (low, high) = harness.paired_difference(
        [12.0, 15.0, 11.0, 14.0, 13.0], [2.0, 4.0, 1.0, 3.0, 3.0], random.Random(0), 500
    )
    assert estimate == pytest.approx(10.0)  # differences 10, 11, 10, 11, 10
    assert 10.0 <= low <= estimate <= high <= 11.0
    assert harness.percent_ci(0.0137, (-0.0556, 0.0866)) == "+1.37% [-5.56%, +8.66%]"


def test_grouped_bootstrap_widens_the_interval_by_the_differences_between_groups() -> None:
    """Two groups (two sets of processes) agreeing within themselves but not with each other:
    resampling rounds alone gives a narrow interval, resampling groups first spans both."""
    low_group = [0.01 + 0.001 * i for i in range(10)]
    high_group = [0.09 + 0.001 * i for i in range(10)]
    base = [[1.0] * 10, [1.0] * 10]
    contender = [[1.0 + v for v in low_group], [1.0 + v for v in high_group]]
    estimate, (low, high) = harness.paired_overhead_grouped(contender, base, random.Random(0), 500)
    flat, _ = harness.paired_overhead(
        [v for g in contender for v in g], [1.0] * 20, random.Random(0), 500
    )
    assert estimate == pytest.approx(flat)
    assert low < 0.02 and high > 0.09  # an all-low and an all-high resample are both likely
    difference, (d_low, d_high) = harness.paired_difference_grouped(
        [[3.0, 3.0], [5.0, 5.0]], [[1.0, 1.0], [1.0, 1.0]], random.Random(0), 500
    )
    assert difference == pytest.approx(3.0)
    assert d_low == pytest.approx(2.0) and d_high == pytest.approx(4.0)


def test_run_worker_quietly_redoes_busy_runs_but_not_failures(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    counter = tmp_path / "runs"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "import harness\n"
        f"with open({str(counter)!r}, 'a') as f:\n"
        "    f.write('x')\n"
        "if sys.argv[1] == 'fail':\n"
        "    raise SystemExit('broken on purpose')\n"
        "harness.emit_result({'ok': True})\n",
        encoding="utf-8",
    )
    # every run counts as busy (more than -1 % of the CPUs used by others): redone twice
    result = harness.run_worker_quietly(
        script, ["go"], retries=2, max_other_load_pct=-1.0, pause_s=0.0
    )
    assert result["ok"] is True
    assert counter.read_text() == "xxx"
    counter.unlink()
    failed = harness.run_worker_quietly(
        script, ["fail"], retries=2, max_other_load_pct=-1.0, pause_s=0.0
    )
    assert "broken on purpose" in failed["error"]
    assert counter.read_text() == "x"
