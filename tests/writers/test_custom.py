"""Writers of the user's own: named in the config's ``writers`` list (``module:Name``) or
registered with ``trainmon.writers.register_writer``, fed exactly like the built-in writers,
and every mistake in naming them a ConfigError at start-up that names ``writers[i]``.

The user modules are written into a temporary folder put on ``sys.path``, as a user's package
would be installed.
"""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.config import load_config
from trainmon.errors import ConfigError
from trainmon.journal import read_journal
from trainmon.writers import Writer, register_writer, registered_writers, unregister_writer

USER_MODULE = '''
from trainmon.writers import Writer

CALLS = []


class RecordingWriter(Writer):
    """A proper Writer subclass that records every call it gets."""

    kind = "recording"

    def __init__(self, label, every="step"):
        self.label = label
        self.every = every
        self.location = "memory:" + label
        CALLS.append(("init", label))

    def write(self, records):
        CALLS.append(("write", [(r.step, dict(r.values)) for r in records]))

    def write_windows(self, windows):
        CALLS.append(("windows", [(w.first_step, w.last_step) for w in windows]))

    def flush(self):
        CALLS.append(("flush",))

    def close(self):
        CALLS.append(("close",))


class DuckWriter:
    """No Writer base class: write, flush and close are enough."""

    every = "window"

    def __init__(self, path=None):
        self.path = path
        self.batches = []
        self.flushes = 0
        self.closed = 0

    def write(self, records):
        self.batches.append([(r.step, dict(r.values)) for r in records])

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed += 1


class NotAWriter:
    def __init__(self):
        pass

    def write(self, records):
        pass


def make_plain_object():
    return object()


class Broken(Writer):
    def __init__(self):
        raise RuntimeError("database is locked")

    def write(self, records):
        pass

    def flush(self):
        pass

    def close(self):
        pass


NOT_CALLABLE = 42
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``user_writers_<n>`` importable from a folder on sys.path, with a fresh CALLS list."""
    name = f"user_writers_{abs(hash(tmp_path)) % 10**8}"
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Names registered by a test are forgotten after it."""
    before = set(registered_writers())
    yield
    for name in set(registered_writers()) - before:
        unregister_writer(name)


def _config(base: Path, writers: list[Any]) -> dict[str, Any]:
    return {
        "steps_per_print": 2,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "writers": writers,
    }


def _journal(base: Path) -> list[tuple[int, dict[str, Any]]]:
    journal = read_journal(base / "job" / "metrics.jsonl")
    return [(r["step"], r["values"]) for r in journal if r["kind"] == "scalars"]


def _windows(base: Path) -> list[dict[str, Any]]:
    """The window records of the JSONL journal (the reference for what writers get)."""
    return [r for r in read_journal(base / "job" / "metrics.jsonl") if r["kind"] == "window"]


def test_a_class_named_in_the_config_gets_what_the_built_in_writers_get(
    tmp_path: Path, user_module: Any
) -> None:
    """{"class": "module:Name", ...} is constructed with the other keys and receives the same
    per-step records as the JSONL writer, the windows, the flushes, and one close."""
    spec = {"class": f"{user_module.__name__}:RecordingWriter", "label": "a"}
    with trainmon.Monitor(_config(tmp_path, [spec])) as monitor:
        (writer,) = [w for w in monitor.writers if w.kind == "recording"]
        assert writer.location == "memory:a"
        for step in range(4):
            monitor.log({"train/loss": 1.0 / (step + 1)}, step=step)
        assert monitor.flush(timeout=30)
    calls = user_module.CALLS
    assert calls[0] == ("init", "a")
    written = [item for call in calls if call[0] == "write" for item in call[1]]
    assert written == _journal(tmp_path)
    windows = [item for call in calls if call[0] == "windows" for item in call[1]]
    assert windows == [(w["first_step"], w["last_step"]) for w in _windows(tmp_path)]
    assert len(windows) >= 2
    assert calls.count(("flush",)) >= 2  # the explicit flush and the final one
    assert calls.count(("close",)) == 1 and calls[-1] == ("close",)


def test_a_dotted_path_works_too(tmp_path: Path, user_module: Any) -> None:
    """ "module.Name" is accepted as well as "module:Name"."""
    spec = {"class": f"{user_module.__name__}.RecordingWriter", "label": "dotted"}
    with trainmon.Monitor(_config(tmp_path, [spec])) as monitor:
        assert [w.kind for w in monitor.writers] == ["jsonl", "recording"]


def test_a_duck_typed_writer_is_wrapped_and_its_every_is_respected(
    tmp_path: Path, user_module: Any
) -> None:
    """An object with write/flush/close (no Writer base) works; its every = "window" makes it
    get one record of window means per window, like a built-in writer set to window."""
    spec = {"class": f"{user_module.__name__}:DuckWriter", "path": "x.db"}
    with trainmon.Monitor(_config(tmp_path, [spec])) as monitor:
        (wrapper,) = [w for w in monitor.writers if w.kind == "custom"]
        assert isinstance(wrapper, Writer) and wrapper.every == "window"
        for step in range(4):
            monitor.log({"train/loss": float(step)}, step=step)
    duck = wrapper.target  # type: ignore[attr-defined]
    assert duck.path == "x.db"
    assert [record for batch in duck.batches for record in batch] == [
        (w["last_step"], {"train/loss": w["stats"]["train/loss"]["mean"]})
        for w in _windows(tmp_path)
    ]
    assert len(duck.batches) >= 1
    assert duck.flushes >= 1 and duck.closed == 1


def test_a_registered_name_builds_its_factory(
    tmp_path: Path, user_module: Any, clean_registry: None
) -> None:
    """register_writer(name, factory) makes {"class": name, ...} call factory(...)."""
    register_writer("recorder", user_module.RecordingWriter)
    with trainmon.Monitor(_config(tmp_path, [{"class": "recorder", "label": "reg"}])) as monitor:
        monitor.log({"train/loss": 1.0}, step=0)
    assert user_module.CALLS[0] == ("init", "reg")
    assert ("write", [(0, {"train/loss": 1.0})]) in user_module.CALLS


def test_several_custom_writers_are_built_in_order(
    tmp_path: Path, user_module: Any, clean_registry: None
) -> None:
    """Each entry of the list becomes one writer, after the built-in ones, in list order."""
    register_writer("recorder", user_module.RecordingWriter)
    specs = [
        {"class": "recorder", "label": "first"},
        {"class": f"{user_module.__name__}:RecordingWriter", "label": "second"},
    ]
    with trainmon.Monitor(_config(tmp_path, specs)) as monitor:
        assert [w.location for w in monitor.writers][1:] == ["memory:first", "memory:second"]


W0 = r"'writers\[0\]"
NAMING_MISTAKES = [
    ({"label": "x"}, W0 + r".class' is missing"),
    ({"class": ""}, W0 + r".class' = ''"),
    (
        {"class": "recordr"},
        W0 + r".class' = 'recordr': no writer is registered.*did you mean 'recorder'",
    ),
    (
        {"class": "no_such_module_xyz:W"},
        W0 + r".class' = 'no_such_module_xyz:W': module 'no_such_module_xyz' could not be "
        r"imported \(ModuleNotFoundError",
    ),
    (
        {"class": "{mod}:RecordingWritr"},
        W0 + r".class' = .*has no attribute 'RecordingWritr'; did you mean 'RecordingWriter'",
    ),
    ({"class": "{mod}:NOT_CALLABLE"}, W0 + r".class' = .*NOT_CALLABLE is a int, not a writer"),
    (
        {"class": "{mod}:NotAWriter"},
        W0 + r".class' = .*class NotAWriter is not a writer: it has no flush, close method",
    ),
    (
        {"class": "{mod}:make_plain_object"},
        W0 + r".class' = .*built object .*which is not a writer: it has no write, flush, close",
    ),
    (
        {"class": "{mod}:RecordingWriter", "label": "x", "colour": "red"},
        r"unknown key " + W0 + r".colour': .*takes: label, every",
    ),
    (
        {"class": "{mod}:RecordingWriter", "lable": "x"},
        r"unknown key " + W0 + r".lable'.*did you mean 'label'",
    ),
    (
        {"class": "{mod}:RecordingWriter"},
        W0 + r"': .*RecordingWriter.*missing a required argument: 'label'",
    ),
]


@pytest.mark.parametrize(("spec", "message"), NAMING_MISTAKES)
def test_naming_mistakes_are_config_errors_at_start_up(
    tmp_path: Path, user_module: Any, clean_registry: None, spec: dict[str, Any], message: str
) -> None:
    """Every way of naming a writer wrongly raises ConfigError when the monitor starts, naming
    writers[0] (its class, or the offending key) and what would fix it."""
    register_writer("recorder", user_module.RecordingWriter)
    spec = {k: v.format(mod=user_module.__name__) if k == "class" else v for k, v in spec.items()}
    with pytest.raises(ConfigError, match=message):
        trainmon.Monitor(_config(tmp_path, [spec]))


def test_a_writers_entry_that_is_not_a_mapping_is_refused_when_loading() -> None:
    """ "writers": ["pkg:W"] is refused by load_config, naming the entry of the writers key."""
    with pytest.raises(ConfigError, match=r"'writers\[0\]' = 'pkg:W': expected a mapping$"):
        load_config({"writers": ["pkg:W"]})


def test_a_constructor_that_fails_leaves_that_writer_out_with_one_warning(
    tmp_path: Path, user_module: Any, trainmon_logs: list[logging.LogRecord]
) -> None:
    """A constructor raising (not a naming mistake) is reported once, naming writers[i] and
    the error; the monitor starts and the other writers run."""
    spec = {"class": f"{user_module.__name__}:Broken"}
    with trainmon.Monitor(_config(tmp_path, [spec])) as monitor:
        assert [w.kind for w in monitor.writers] == ["jsonl"]
        monitor.log({"train/loss": 1.0}, step=0)
    (warning,) = [r.getMessage() for r in trainmon_logs if r.levelno >= logging.WARNING]
    assert f"writers[0] ({user_module.__name__}:Broken) disabled" in warning
    assert "RuntimeError: database is locked" in warning
    assert _journal(tmp_path) == [(0, {"train/loss": 1.0})]


@pytest.mark.parametrize("name", ["", "a:b", "a.b", 3])
def test_register_writer_refuses_names_that_look_like_paths(name: Any) -> None:
    """A registered name must be a non-empty string without ':' or '.'."""
    with pytest.raises(ValueError, match="register_writer"):
        register_writer(name, lambda: None)


def test_register_writer_refuses_a_factory_that_is_not_callable(clean_registry: None) -> None:
    """The factory must be callable; registering a name again replaces it; unregister forgets."""
    with pytest.raises(TypeError, match="not callable"):
        register_writer("x", 3)  # type: ignore[arg-type]
    register_writer("x", dict)
    register_writer("x", list)
    assert registered_writers()["x"] is list
    unregister_writer("x")
    unregister_writer("x")
    assert "x" not in registered_writers()


def test_an_object_given_to_the_monitor_directly_is_wrapped_or_refused_by_name() -> None:
    """``Monitor(writers=[...])`` takes the same duck-typed writers as the config's ``writers``
    list, and refuses anything else naming its index and the missing methods (not an
    AttributeError from a background thread)."""

    class Rows:
        def __init__(self) -> None:
            self.rows: list[tuple[int, float]] = []

        def write(self, records: Any) -> None:
            self.rows += [(r.step, r.values["train/loss"]) for r in records]

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    rows = Rows()
    with trainmon.Monitor({"console": {"enabled": False}}, writers=[rows]) as monitor:
        for step in (1, 2):
            monitor.log({"train/loss": step / 2}, step=step)
    assert rows.rows == [(1, 0.5), (2, 1.0)]

    class Half:
        def write(self, records: Any) -> None:
            pass

    with pytest.raises(
        ConfigError, match=r"writers=\.\.\.\)\[1\] is Half .*no flush, close method"
    ):
        trainmon.Monitor({"console": {"enabled": False}}, writers=[Rows(), Half()])
