"""Property tests: any name and any number either round-trips exactly through every file writer
or is refused at the call site; bad values name their metric; any config is loaded or refused
with a ConfigError that names the key."""

from __future__ import annotations

import csv
import math
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon
from trainmon import ConfigError, Monitor, load_config, read_journal
from trainmon.config import reference_rows

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), INT64, st.booleans())
NAMES = st.text(min_size=1)
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _monitor(folder: Path) -> Monitor:
    section = {"enabled": True, "output_path": str(folder), "job_name": "run"}
    return Monitor(
        {
            "tensorboard": section,
            "csv_monitor": section,
            "jsonl": section,
            "console": {"enabled": False},
        }
    )


def _csv_text(value: Any) -> str:
    """How a number must appear in CSV: Python's exact spelling, bools as 0/1."""
    if isinstance(value, bool):
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _same_number(got: Any, want: Any) -> bool:
    """Equal in value and kind (bools come back as the ints 0/1); NaN equals NaN."""
    if isinstance(want, bool):
        return type(got) is int and got == int(want)
    if isinstance(want, float):
        return type(got) is float and (got == want or (math.isnan(got) and math.isnan(want)))
    return type(got) is int and got == want


def _float32(value: Any) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(float(value)))


@st.composite
def logging_sessions(draw: st.DrawFn) -> list[tuple[str, Any, int, bool]]:
    """Events ``(name, value, step, use_default_step)``, each at its own step."""
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    count = draw(st.integers(min_value=1, max_value=12))
    steps = draw(st.lists(INT64, min_size=count, max_size=count, unique=True))
    return [
        (draw(st.sampled_from(names)), draw(VALUES), step, draw(st.booleans())) for step in steps
    ]


@SETTINGS
@given(events=logging_sessions(), one_call=st.booleans())
def test_any_name_and_number_round_trips_or_is_refused_at_the_call(
    events: list[tuple[str, Any, int, bool]], one_call: bool
) -> None:
    """Any non-empty name with any float, int64 or bool at any int64 step is either refused by the
    call with TypeError/ValueError or read back identically from JSONL, CSV and TensorBoard
    (float32), and the background thread survives (flush() returns True)."""
    folder = Path(tempfile.mkdtemp(prefix="trainmon-prop-"))
    try:
        monitor = _monitor(folder)
        accepted: list[tuple[str, Any, int]] = []
        calls = [events] if one_call else [[event] for event in events]
        for call in calls:
            items: list[tuple[Any, ...]] = []
            for name, value, step, use_default in call:
                if use_default and not one_call:
                    monitor.step = step
                    items.append((name, value))
                else:
                    items.append((name, value, step))
            try:
                monitor.write_events(items)
            except (TypeError, ValueError):
                continue
            accepted += [(name, value, step) for name, value, step, _ in call]
        assert monitor.flush(timeout=30) is True
        monitor.close()

        run = folder / "run"
        by_name: dict[str, list[tuple[int, Any]]] = {}
        for name, value, step in accepted:
            by_name.setdefault(name, []).append((step, value))

        journal: dict[str, list[tuple[int, Any]]] = {}
        for record in read_journal(run):
            if record.get("kind") == "scalars":
                for name, value in record["values"].items():
                    journal.setdefault(name, []).append((record["step"], value))
        assert set(journal) == set(by_name)
        for name, points in by_name.items():
            got = journal[name]
            assert [s for s, _ in got] == [s for s, _ in points]
            assert all(_same_number(g, w) for (_, g), (_, w) in zip(got, points, strict=True)), (
                got,
                points,
            )

        found = []
        for path in run.glob("*.csv"):
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
            assert rows[0][0] == "step" and len(rows[0]) == 2
            found.append((rows[0][1], tuple(tuple(row) for row in rows[1:])))
        wanted = [
            (name.rsplit("/", 1)[-1], tuple((str(s), _csv_text(v)) for s, v in points))
            for name, points in by_name.items()
        ]
        assert Counter(found) == Counter(wanted)

        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        assert set(acc.Tags()["scalars"]) == set(by_name)
        for name, points in by_name.items():
            got_tb = [(e.step, e.value) for e in acc.Scalars(name)]
            assert [s for s, _ in got_tb] == [s for s, _ in points]
            for (_, g), (_, w) in zip(got_tb, points, strict=True):
                assert g == _float32(w) or (math.isnan(g) and math.isnan(w)), (name, g, w)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


INVALID_VALUES = st.one_of(
    st.text(),
    st.binary(),
    st.lists(st.floats(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.floats(), max_size=2),
    st.complex_numbers(),
    st.integers(min_value=2, max_value=6).map(lambda n: np.arange(n, dtype=np.float32)),
    st.integers(min_value=1, max_value=3).map(lambda n: np.zeros((n, 2))),
    st.complex_numbers(allow_nan=False, allow_infinity=False).map(np.complex128),
    st.integers(min_value=2, max_value=5).map(torch.ones),
    st.just(torch.tensor(1 + 2j)),
    st.just(np.str_("1.0")),
    st.just(object()),
)


@SETTINGS
@given(name=NAMES, value=INVALID_VALUES, use_log=st.booleans())
def test_invalid_values_are_refused_naming_the_metric(name: str, value: Any, use_log: bool) -> None:
    """A string, bytes, list, dict, complex number, multi-element array or tensor, or any other
    object as a value raises TypeError or ValueError naming the metric, and the monitor keeps
    working afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="trainmon-prop-"))
    try:
        section = {"enabled": True, "output_path": str(folder), "job_name": "run"}
        monitor = Monitor({"jsonl": section, "console": {"enabled": False}})
        with pytest.raises((TypeError, ValueError)) as info:
            if use_log:
                monitor.log({name: value}, step=1)
            else:
                monitor.write_events([(name, value, 1)])
        assert repr(name) in str(info.value)
        monitor.log({name: 2.5}, step=2)
        assert monitor.flush(timeout=30) is True
        monitor.close()
        written = [
            (r["step"], r["values"]) for r in read_journal(folder / "run") if r["kind"] == "scalars"
        ]
        assert written == [(2, {name: 2.5})]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- configs ---------------------------------------------------------------------------------

KEY_PATHS = [row[0] for row in reference_rows() if "[" not in row[0]]  # not rule or sink keys
KEY_TYPES = {row[0]: row[1] for row in reference_rows()}
SECTIONS = sorted({path.split(".")[0] for path in KEY_PATHS if "." in path})
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**1024, max_value=2**1100),  # beyond float range
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["stdout", "stderr", "wait", "drop", "step", "window", "", ".", "..", "/abs"]),
    st.sampled_from(["../up", "a\x00b", "run", "C:\\x", "x/../.."]),
    st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _plausible(description: str) -> st.SearchStrategy[Any]:
    """Values of the type a key documents (most, not all, of them acceptable)."""
    options: list[st.SearchStrategy[Any]] = []
    choices = re.findall(r"'([^']*)'", description)
    if description.startswith("one of") and choices:
        options.append(st.sampled_from(choices))
    elif "list of strings" in description:
        options.append(st.lists(st.text(max_size=5), max_size=3))
    else:
        if "boolean" in description:
            options.append(st.booleans())
        if "integer" in description:
            options.append(st.integers(min_value=0, max_value=10**6))
        if "number" in description:
            options.append(st.floats(min_value=0, max_value=1e6))
        if "string" in description:
            options.append(st.sampled_from(["", "run", "out/dir", "/tmp/trainmon-x", "x y"]))
    if "null" in description:
        options.append(st.none())
    return st.one_of(options) if options else ANY_VALUE


@st.composite
def configs(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A config of known keys with values of any type, sometimes a section that is not a
    mapping or a misspelt key; returns it with every key path it contains."""
    paths = draw(st.lists(st.sampled_from(KEY_PATHS), max_size=6, unique=True))
    config: dict[str, Any] = {}
    for path in paths:
        plausible = draw(st.integers(0, 4)) > 0
        value = draw(_plausible(KEY_TYPES[path]) if plausible else ANY_VALUE)
        if "." in path:
            section, key = path.split(".", 1)
            config.setdefault(section, {})[key] = value
        else:
            config[path] = value
    if draw(st.integers(0, 9)) == 0:
        section = draw(st.sampled_from(SECTIONS))
        config[section] = draw(ANY_VALUE)
    if draw(st.integers(0, 9)) == 0:
        section = draw(st.sampled_from(SECTIONS))
        if isinstance(config.get(section, {}), dict):
            config.setdefault(section, {})["enabeld"] = True
    named = []
    for key, value in config.items():
        named.append(key)
        if key in SECTIONS and isinstance(value, dict):
            named += [f"{key}.{inner}" for inner in value]
    return config, named


def _only(config: dict[str, Any], path: str) -> dict[str, Any]:
    if "." in path:
        section, key = path.split(".", 1)
        return {section: {key: config[section][key]}}
    return {path: config[path]}


def _get(config: trainmon.TrainmonConfig, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


@settings(max_examples=300, deadline=None)
@given(case=configs())
def test_any_config_loads_or_names_the_offending_key(
    case: tuple[dict[str, Any], list[str]],
) -> None:
    """load_config on any mix of known keys and values either returns a config that holds the
    given values or raises ConfigError naming the full path of a key it was given, whose value
    alone is refused too; never any other exception."""
    config, named = case
    try:
        loaded = load_config(config)
    except ConfigError as exc:
        message = str(exc)
        culprits = [path for path in named if f"'{path}'" in message or f"'{path}[" in message]
        assert culprits, f"no key named in: {message}"
        path = max(culprits, key=len)  # 'tensorboard.job_name' over 'tensorboard'
        alone = _only(config, path)
        if len(culprits) > 1 and "disagree" in message:  # two keys that only clash together
            for other in culprits:
                section, key = other.split(".", 1)
                alone.setdefault(section, {})[key] = config[section][key]
        with pytest.raises(ConfigError):
            load_config(alone)
        return
    for path in named:
        if "." not in path and path in SECTIONS:
            continue
        given_value = config[path.split(".")[0]]
        if "." in path:
            given_value = given_value[path.split(".", 1)[1]]
        got = _get(loaded, path)
        assert got == given_value or (got != got and given_value != given_value), path
        assert isinstance(got, bool) == isinstance(given_value, bool), path
