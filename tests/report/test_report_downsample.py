"""Down-sampling for display keeps spikes, dips, gaps and the ends of a series."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.report.downsample import bucket_means, minmax_buckets, profile
from trainmon.report.model import Series


def series(values: list[float]) -> Series:
    """A series at steps 0..n-1."""
    return Series("m", list(range(len(values))), values)


def test_a_one_step_spike_and_dip_in_a_million_survive() -> None:
    """Among 1,000,000 points, the single highest and lowest are kept, and so are the first
    and last points; at most two points per bucket (plus the ends) remain."""
    rng = random.Random(0)
    values = [1.0 + rng.random() for _ in range(1_000_000)]
    values[123_457] = 1000.0
    values[876_543] = -5.0
    x, y = minmax_buckets(series(values), buckets=2000)
    assert len(x) <= 2 * 2000 + 2
    assert (123_457, 1000.0) in zip(x, y, strict=True)
    assert (876_543, -5.0) in zip(x, y, strict=True)
    assert x[0] == 0 and x[-1] == 999_999 and y[-1] == values[-1]
    assert x == sorted(set(x))


def test_nan_and_inf_stay_visible_as_gaps() -> None:
    """A NaN or Inf inside a long series keeps a None (a gap) at its step."""
    values = [float(i % 10) for i in range(100_000)]
    values[5_000] = math.nan
    values[60_000] = math.inf
    x, y = minmax_buckets(series(values), buckets=100)
    gaps = [s for s, v in zip(x, y, strict=True) if v is None]
    assert gaps == [5_000, 60_000]


def test_short_series_are_kept_whole() -> None:
    """A series no longer than two points per bucket is returned as it is (NaN as None)."""
    x, y = minmax_buckets(series([1.0, math.nan, 3.0]), buckets=10)
    assert x == [0, 1, 2] and y == [1.0, None, 3.0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(-1e6, 1e6), st.just(math.nan), st.just(math.inf)),
        min_size=1,
        max_size=400,
    ),
    st.integers(min_value=1, max_value=50),
)
def test_profile_statistics_equal_a_direct_computation(values: list[float], buckets: int) -> None:
    """min, max, sum and count of the finite values are exact whatever the bucketing."""
    found = profile(series(values), buckets)
    finite = [v for v in values if math.isfinite(v)]
    assert found.finite == len(finite)
    if finite:
        assert found.low == min(finite) and found.high == max(finite)
        assert found.total == pytest.approx(math.fsum(finite), rel=1e-9, abs=1e-6)
    else:
        assert math.isnan(found.low) and math.isnan(found.high)
    kept = found.picks
    assert kept == sorted(set(kept)) and kept[0] == 0 and kept[-1] == len(values) - 1


def test_bucket_means_and_maxima() -> None:
    """Aligned columns average per bucket; None and NaN are left out of a bucket's mean."""
    ranges, means, maxima = bucket_means([[1.0, 3.0, None, 5.0], [1.0, math.nan, 2.0, 4.0]], 2)
    assert ranges == [(0, 2), (2, 4)]
    assert means == [[2.0, 5.0], [1.0, 3.0]]
    assert maxima == [[3.0, 5.0], [1.0, 4.0]]
