"""Fewer points for display, without losing what matters: spikes, dips, NaNs, the last value.

:func:`profile` splits a series into equal-count buckets and keeps each bucket's lowest and
highest point (in step order), plus the first and last point: a spike of one step among a
million stays visible, and a chart of 2,000 buckets draws at most ~4,000 points. A non-finite
value keeps one ``None`` (a gap in the line) in its bucket, so a NaN is never smoothed away.
The same pass gives the series' finite min, max and sum, so the summary does not read the
values again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainmon.report.model import Series

DEFAULT_BUCKETS = 2000


@dataclass(frozen=True)
class Profile:
    """A series read once: which points to draw, and its finite min / max / sum / count."""

    picks: list[int]
    """Indices of the points to draw, ascending."""
    low: float
    high: float
    total: float
    finite: int


def _all_finite(values: Sequence[float]) -> bool:
    total = sum(values)
    return bool(total - total == 0)


def finite_or_none(values: Sequence[float]) -> list[float | None]:
    """``values`` with NaN/±Inf as None (a gap for the chart, null in JSON)."""
    if _all_finite(values):
        return list(values)
    return [v if v - v == 0 else None for v in values]


def profile(series: Series, buckets: int = DEFAULT_BUCKETS) -> Profile:
    """The series' :class:`Profile` for ``buckets`` buckets (computed once, then cached)."""
    found: Profile | None = series.cache.get(buckets)
    if found is None:
        found = series.cache[buckets] = _profile(series.values, buckets)
    return found


def _profile(values: Sequence[float], buckets: int) -> Profile:
    n = len(values)
    if n <= 2 * buckets:
        total = sum(values)
        finite = values if total - total == 0 else [v for v in values if v - v == 0]
        if finite is not values:
            total = math.fsum(finite)
        return Profile(
            list(range(n)),
            min(finite) if finite else math.nan,
            max(finite) if finite else math.nan,
            total if finite else 0.0,
            len(finite),
        )
    keep: list[int] = [0]
    low = math.inf
    high = -math.inf
    grand = 0.0
    count = 0
    for b in range(buckets):
        lo = b * n // buckets
        hi = (b + 1) * n // buckets
        chunk = values[lo:hi]
        total = sum(chunk)
        if total - total == 0:
            small = min(chunk)
            big = max(chunk)
            i = chunk.index(small)
            j = chunk.index(big)
            picks: tuple[int, ...] = (i, j) if i < j else (j, i) if j < i else (i,)
            grand += total
            count += hi - lo
        else:
            finite = [v for v in chunk if v - v == 0]
            gap = next(k for k, v in enumerate(chunk) if v - v != 0)
            if finite:
                small = min(finite)
                big = max(finite)
                picks = tuple(sorted({chunk.index(small), chunk.index(big), gap}))
                grand += math.fsum(finite)
                count += len(finite)
            else:
                picks = (gap,)
                continue
        if small < low:
            low = small
        if big > high:
            high = big
        keep.extend(lo + k for k in picks)
    keep.append(n - 1)
    unique = sorted(set(keep))
    return Profile(unique, low if count else math.nan, high if count else math.nan, grand, count)


def minmax_buckets(
    series: Series, buckets: int = DEFAULT_BUCKETS
) -> tuple[list[int], list[float | None]]:
    """At most ~2 points per bucket: each bucket's min and max, the first and the last point."""
    steps, values = series.steps, series.values
    if len(steps) <= 2 * buckets:
        return list(steps), finite_or_none(values)
    picks = profile(series, buckets).picks
    out_values: list[float | None] = []
    for index in picks:
        value = values[index]
        out_values.append(value if value - value == 0 else None)
    return [steps[i] for i in picks], out_values


def bucket_means(
    columns: Sequence[Sequence[float | None]], buckets: int
) -> tuple[list[tuple[int, int]], list[list[float | None]], list[list[float | None]]]:
    """Aligned columns cut into equal-count buckets: the (lo, hi) index ranges, each column's
    bucket mean and bucket max over its finite values (None where a bucket has none)."""
    n = len(columns[0]) if columns else 0
    count = min(buckets, n)
    ranges = [(b * n // count, (b + 1) * n // count) for b in range(count)] if count else []
    means: list[list[float | None]] = []
    maxima: list[list[float | None]] = []
    for column in columns:
        col_means: list[float | None] = []
        col_max: list[float | None] = []
        has_none = None in column
        for lo, hi in ranges:
            chunk = column[lo:hi]
            total = sum(chunk) if not has_none else None  # type: ignore[arg-type]
            if total is not None and total - total == 0:
                col_means.append(total / (hi - lo))
                col_max.append(max(chunk))  # type: ignore[type-var]
                continue
            finite = [v for v in chunk if v is not None and v - v == 0]
            col_means.append(sum(finite) / len(finite) if finite else None)
            col_max.append(max(finite) if finite else None)
        means.append(col_means)
        maxima.append(col_max)
    return ranges, means, maxima


def nonfinite_steps(series: Series, limit: int = 500) -> tuple[list[int], int]:
    """Steps of the first ``limit`` NaN/±Inf values, and how many there are in all."""
    found = profile(series, DEFAULT_BUCKETS)
    if found.finite == len(series.values):
        return [], 0
    bad = [s for s, v in zip(series.steps, series.values, strict=True) if v - v != 0]
    return bad[:limit], len(bad)
