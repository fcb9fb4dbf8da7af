"""Histograms, text and hyper-parameters: captured at the call, read back with TensorBoard's own
reader (EventAccumulator, the hparams plugin's parsers) and ``read_journal``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util

import trainmon
from conftest import host_read_spy, local_config
from trainmon.journal import read_journal


def _accumulator(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def _journal(base: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in read_journal(base / "job" / "metrics.jsonl") if r["kind"] == kind]


def test_histogram_reads_back_in_tensorboard_and_the_journal_as_it_was_at_the_call(
    tmp_path: Path,
) -> None:
    """A tensor changed in place after log_histogram is recorded as it was at the call: the
    buckets, min, max, count and sums read back by EventAccumulator and read_journal match
    numpy's own histogram of the values the test kept."""
    weights = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    kept = [weights.clone().numpy()]
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(1, 4):
            monitor.step = step
            monitor.log({"train/loss": 1.0 / step})
            monitor.log_histogram("weights/fc1", weights, bins=20)
            weights.mul_(2).add_(1)  # in place, after the call
            kept.append(weights.clone().numpy())
    events = _accumulator(tmp_path / "tb" / "job").Histograms("weights/fc1")
    journal = _journal(tmp_path, "histogram")
    assert [e.step for e in events] == [1, 2, 3] == [r["step"] for r in journal]
    for event, record, values in zip(events, journal, kept, strict=False):
        counts, edges = np.histogram(values.astype(np.float64), bins=20)
        histo = event.histogram_value
        assert list(histo.bucket) == counts.tolist() == record["counts"]
        assert np.allclose(histo.bucket_limit, edges[1:]) and np.allclose(record["edges"], edges)
        assert histo.min == pytest.approx(values.min()) == record["min"]
        assert histo.max == pytest.approx(values.max()) == record["max"]
        assert histo.num == 1000 == record["num"]
        assert histo.sum == pytest.approx(values.astype(np.float64).sum(), abs=1e-6)
        assert record["sum_squares"] == pytest.approx(float((values.astype(np.float64) ** 2).sum()))


def test_histogram_of_a_numpy_array_a_list_and_non_finite_values(tmp_path: Path) -> None:
    """Arrays are copied at the call; lists are accepted; NaN and Inf are counted apart and
    left out of the buckets; a constant tensor is one bucket; bfloat16 tensors are read."""
    array = np.array([1.0, 2.0, np.nan, np.inf, 3.0])
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.log_histogram("a", array, step=1)
        array[:] = 7.0
        monitor.log_histogram("b", [5, 5, 5], step=2)
        monitor.log_histogram("c", torch.ones(4, dtype=torch.bfloat16), step=3)
        monitor.log_histogram("d", [float("nan")], step=4)
    by_name = {r["name"]: r for r in _journal(tmp_path, "histogram")}
    assert by_name["a"]["num"] == 3 and by_name["a"]["non_finite"] == 2
    assert (by_name["a"]["min"], by_name["a"]["max"], by_name["a"]["sum"]) == (1.0, 3.0, 6.0)
    assert sum(by_name["a"]["counts"]) == 3
    assert by_name["b"]["counts"] == [3] and by_name["b"]["edges"] == [5.0, 5.0]
    assert by_name["c"]["counts"] == [4] and by_name["c"]["sum"] == 4.0
    assert by_name["d"]["num"] == 0 and by_name["d"]["non_finite"] == 1
    assert by_name["d"]["counts"] == []
    histos = _accumulator(tmp_path / "tb" / "job").Histograms("b")
    assert list(histos[0].histogram_value.bucket) == [3.0]


@pytest.mark.parametrize(
    ("values", "error", "says"),
    [
        ("text", TypeError, "expected a tensor, a numpy array"),
        (3.0, TypeError, "0 dimension(s)"),
        ([], ValueError, "no values"),
        (torch.empty(0), ValueError, "empty"),
        (torch.zeros(2, dtype=torch.complex64), TypeError, "no readable real values"),
        (torch.zeros(3, device="meta"), TypeError, "no readable real values"),
        (torch.zeros(3).to_sparse(), TypeError, "dense"),
        (np.array(["a", "b"]), TypeError, "dtype <U1"),
    ],
)
def test_log_histogram_refuses_what_it_cannot_bin_at_the_call(
    tmp_path: Path, values: Any, error: type[Exception], says: str
) -> None:
    """Bad input is refused on the calling thread, naming the histogram and what was expected."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(error, match="log_histogram\\('h'\\)") as raised:
            monitor.log_histogram("h", values)
        assert says in str(raised.value)
        with pytest.raises(ValueError, match="bins = 0"):
            monitor.log_histogram("h", [1.0], bins=0)


def test_log_histogram_never_reads_tensor_values_on_the_calling_thread(tmp_path: Path) -> None:
    """Only a clone happens on the caller: no .item()/.tolist()/.cpu()/.numpy() there."""
    Counting, reads_on_caller = host_read_spy(frozenset({"histc"}))

    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        for step in range(20):
            monitor.log_histogram("w", torch.arange(10.0).as_subclass(Counting), step=step)
    assert reads_on_caller == []
    assert len(_journal(tmp_path, "histogram")) == 20


def test_text_reads_back_from_the_text_plugin_and_the_journal(tmp_path: Path) -> None:
    """log_text is a string tensor for TensorBoard's text plugin at its step, and a journal line."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.log_text("samples/generated", "Once upon a time ✓", step=5)
        monitor.step = 6
        monitor.log_text("samples/generated", "<b>not html</b>")
        with pytest.raises(TypeError, match="expected a string"):
            monitor.log_text("samples/generated", 3)  # type: ignore[arg-type]
    acc = _accumulator(tmp_path / "tb" / "job")
    tensors = acc.Tensors("samples/generated")
    texts = [tensor_util.make_ndarray(t.tensor_proto).item().decode() for t in tensors]
    assert [t.step for t in tensors] == [5, 6]
    assert texts == ["Once upon a time ✓", "<b>not html</b>"]
    assert acc.SummaryMetadata("samples/generated").plugin_data.plugin_name == "text"
    journal = _journal(tmp_path, "text")
    assert [(r["step"], r["name"], r["text"]) for r in journal] == [
        (5, "samples/generated", "Once upon a time ✓"),
        (6, "samples/generated", "<b>not html</b>"),
    ]


def test_hparams_read_back_with_the_hparams_plugin_and_the_journal(tmp_path: Path) -> None:
    """log_hparams writes the hparams plugin's experiment (names, types, metrics) and session
    start info (values), as its own parsers read them; nested keys are flattened; metrics are
    logged as scalars too; the journal has an ``hparams`` record."""
    hparams = {
        "lr": 3e-4,
        "batch_size": 64,
        "amp": True,
        "optimizer": {"name": "adamw", "betas": (0.9, 0.95)},
        "scheduler": None,
        "seed": np.int64(7),
    }
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        monitor.step = 3
        monitor.log_hparams(hparams, metrics={"eval/loss": 1.5})
    acc = _accumulator(tmp_path / "tb" / "job")
    content = acc.PluginTagToContent("hparams")
    experiment = hparams_metadata.parse_experiment_plugin_data(
        content[hparams_metadata.EXPERIMENT_TAG]
    )
    types = {info.name: info.type for info in experiment.hparam_infos}
    assert types == {
        "lr": 3,  # DATA_TYPE_FLOAT64
        "batch_size": 3,
        "amp": 2,  # DATA_TYPE_BOOL
        "optimizer.name": 1,  # DATA_TYPE_STRING
        "optimizer.betas": 1,
        "scheduler": 1,
        "seed": 3,
    }
    assert [m.name.tag for m in experiment.metric_infos] == ["eval/loss"]
    start = hparams_metadata.parse_session_start_info_plugin_data(
        content[hparams_metadata.SESSION_START_INFO_TAG]
    )
    values = {
        k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
        for k, v in start.hparams.items()
    }
    assert values == {
        "lr": 3e-4,
        "batch_size": 64.0,
        "amp": True,
        "optimizer.name": "adamw",
        "optimizer.betas": "(0.9, 0.95)",
        "scheduler": "None",
        "seed": 7.0,
    }
    assert [(s.step, s.value) for s in acc.Scalars("eval/loss")] == [(3, 1.5)]
    (record,) = _journal(tmp_path, "hparams")
    assert record["hparams"]["optimizer.name"] == "adamw" and record["hparams"]["seed"] == 7
    assert record["metrics"] == {"eval/loss": 1.5}


def test_log_hparams_refuses_bad_keys_and_metrics(tmp_path: Path) -> None:
    """A non-string key and a non-numeric metric are refused at the call, named."""
    with trainmon.Monitor(local_config(tmp_path)) as monitor:
        with pytest.raises(TypeError, match="key 1 under 'opt'"):
            monitor.log_hparams({"opt": {1: "x"}})
        with pytest.raises(TypeError, match="metric 'eval/acc' = 'high'"):
            monitor.log_hparams({"lr": 1}, metrics={"eval/acc": "high"})
        with pytest.raises(TypeError, match="expected a mapping"):
            monitor.log_hparams([("lr", 1)])  # type: ignore[arg-type]


def test_writers_without_a_write_extras_hook_ignore_histograms(tmp_path: Path) -> None:
    """CSV and console writers (no such hook) are unaffected: the CSV holds only scalars."""
    config = local_config(tmp_path)
    with trainmon.Monitor(config) as monitor:
        monitor.log({"train/loss": 1.0}, step=1)
        monitor.log_histogram("weights", [1.0, 2.0], step=1)
        monitor.log_text("note", "hi", step=1)
    files = sorted(p.name for p in (tmp_path / "csv" / "job").glob("*.csv"))
    assert files == ["train_loss.csv"]


def test_a_users_writer_receives_the_extras_as_the_types_trainmon_exports() -> None:
    """A writer of the user's own with ``write_extras`` gets ``trainmon.Histogram``, ``Text``,
    ``Hparams``, ``Progress``, ``Span`` and ``AttemptEnd``, holding what the test logged
    (counted by the test)."""

    class Collect:
        def __init__(self) -> None:
            self.extras: list[object] = []

        def write(self, records: object) -> None:
            pass

        def write_extras(self, records: list[object]) -> None:
            self.extras.extend(records)

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    mine = Collect()
    values = [0.5, 1.5, 2.5, float("nan")]
    with trainmon.Monitor({"console": {"enabled": False}}, writers=[mine]) as monitor:
        monitor.set_total_steps(10)
        monitor.log_histogram("weights", values, step=3, bins=2)
        monitor.log_text("note", "hello", step=3)
        monitor.log_hparams({"opt": {"lr": 0.1}}, metrics={"eval/acc": 0.9})
        with monitor.span("eval"):
            time.sleep(0.05)
    kinds = {type(e).__name__: e for e in mine.extras}
    assert set(kinds) == {"Histogram", "Text", "Hparams", "Progress", "Span", "AttemptEnd"}
    span = kinds["Span"]
    assert isinstance(span, trainmon.Span) and span.kind == "eval"
    assert 0.05 <= span.end_time - span.start_time < 1.0
    end = kinds["AttemptEnd"]
    assert isinstance(end, trainmon.AttemptEnd) and (end.status, end.stop_reason) == (
        "success",
        None,
    )
    histogram = kinds["Histogram"]
    assert isinstance(histogram, trainmon.Histogram)
    assert (histogram.name, histogram.step, histogram.num, histogram.non_finite) == (
        "weights",
        3,
        3,
        1,
    )
    assert sum(histogram.counts) == 3 and histogram.sum == 4.5
    assert isinstance(kinds["Text"], trainmon.Text) and kinds["Text"].text == "hello"
    hparams = kinds["Hparams"]
    assert isinstance(hparams, trainmon.Hparams) and dict(hparams.hparams) == {"opt.lr": 0.1}
    assert isinstance(kinds["Progress"], trainmon.Progress) and kinds["Progress"].total_steps == 10


# ---- compare and report --------------------------------------------------------------------


def _run_with_extras(base: Path, lr: float, optimizer: str, seed: int) -> Path:
    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": f"run-{optimizer}"},
    }
    with trainmon.Monitor(config) as monitor:
        monitor.log_hparams({"lr": lr, "optimizer": {"name": optimizer}, "seed": seed})
        for step in range(1, 11):
            monitor.log({"train/loss": 1.0 / step}, step=step)
            if step % 5 == 0:
                monitor.log_histogram("weights/fc1", np.arange(step * 10.0), step=step)
        monitor.log_text("samples", "<script>alert(1)</script> & more", step=10)
    return base / f"run-{optimizer}"


def test_compare_lists_the_hyper_parameters_that_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainmon compare`` prints (and gives in --json) the keys whose values differ, and only
    those; a key one run lacks shows ``-``."""
    import orjson

    from trainmon.cli import main

    a = _run_with_extras(tmp_path / "a", 1e-3, "adam", 1)
    b = _run_with_extras(tmp_path / "b", 3e-4, "sgd", 1)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("hyper-parameters that differ (2):") :].splitlines()
    assert section[2].split() == ["lr", "0.001", "0.0003"]
    assert section[3].split() == ["optimizer.name", "adam", "sgd"]
    assert "seed" not in out[out.index("hyper-parameters that differ") :]
    assert main(["compare", "--json", str(a), str(b)]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["hparams"] == [
        {"key": "lr", "a": 0.001, "b": 0.0003},
        {"key": "optimizer.name", "a": "adam", "b": "sgd"},
    ]


def test_report_shows_hparams_histograms_and_escaped_text(tmp_path: Path) -> None:
    """The report has a hyper-parameters table (differing rows first and marked), one figure per
    histogram name with the last snapshot's buckets as SVG bars, and the text, escaped."""
    import re

    from trainmon.report.html import render_report
    from trainmon.report.loading import load_run

    runs = [
        load_run(_run_with_extras(tmp_path / "a", 1e-3, "adam", 1)),
        load_run(_run_with_extras(tmp_path / "b", 3e-4, "sgd", 1)),
    ]
    assert runs[0].hparams == {"lr": 1e-3, "optimizer.name": "adam", "seed": 1}
    assert [r["step"] for r in runs[0].histograms["weights/fc1"]] == [5, 10]
    page = render_report(runs)
    table = page[page.index('<section id="hparams">') :]
    table = table[: table.index("</section>")]
    rows = re.findall(r'<tr class="(\w+)"><td>([^<]+)</td>', table)
    assert rows == [("differs", "lr"), ("differs", "optimizer.name"), ("same", "seed")]
    histograms = page[page.index('<section id="histograms">') :]
    figure = histograms[: histograms.index("</figure>")]
    assert 'data-name="weights/fc1"' in figure
    assert figure.count("<svg") == 4  # per run: last buckets and the band over steps
    assert figure.count("<rect") == 2 * 30  # 100 values in 30 buckets, per run
    assert "step 10" in figure and "100 values" in figure
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<script>alert(1)" not in page


# ---- progress and ETA ----------------------------------------------------------------------


def _console_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def _seconds(text: str) -> float:
    """Inverse of format_duration for the short forms a test run produces (``2.4s``, ``12s``)."""
    import re

    match = re.fullmatch(r"(\d+(?:\.\d+)?)s", text)
    assert match, text
    return float(match.group(1))


def test_eta_on_a_steady_run_is_within_20_percent_of_the_time_it_really_took(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With trainmon.total_steps, each console line reads ``step s/N (p%) · elapsed · ETA``;
    on steps of a steady 40 ms (sleeps), the ETA printed at step 20 of 60 is within 20% of the
    time steps 21..60 then took, measured by the test, and elapsed matches its own clock."""
    import re
    import time

    config = {
        "steps_per_print": 10,
        "console": {"enabled": True},
        "trainmon": {"total_steps": 60},
    }
    times: dict[int, float] = {}
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 61):
            time.sleep(0.04)
            monitor.log({"train/loss": 1.0}, step=step)
            times[step] = time.time()
        monitor.flush()
    lines = _console_lines(capsys.readouterr().out)
    assert [line.split(" ", 2)[1] for line in lines] == [f"{s}/60" for s in range(10, 61, 10)]
    pattern = r"step 20/60 \(33%\) · elapsed (\S+) · ETA (\S+) \|"
    match = re.match(pattern, lines[1])
    assert match, lines[1]
    elapsed, eta = _seconds(match.group(1)), _seconds(match.group(2))
    truth_remaining = times[60] - times[20]
    assert abs(eta - truth_remaining) <= 0.2 * truth_remaining, (eta, truth_remaining)
    truth_elapsed = times[20] - times[1]
    assert abs(elapsed - truth_elapsed) <= max(0.1, 0.2 * truth_elapsed), (elapsed, truth_elapsed)
    assert lines[-1].startswith("step 60/60 (100%) · elapsed ")
    assert "ETA" not in lines[-1].split("|")[0]


def test_set_total_steps_turns_the_eta_on_and_refuses_a_bad_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A total given at run time (e.g. len(loader) * epochs) shows from the next window on."""
    with trainmon.Monitor({"steps_per_print": 2, "console": {"enabled": True}}) as monitor:
        monitor.log({"train/loss": 1.0}, step=1)
        monitor.log({"train/loss": 1.0}, step=2)
        monitor.flush()
        monitor.set_total_steps(8)
        for step in (3, 4):
            monitor.log({"train/loss": 1.0}, step=step)
        with pytest.raises(ValueError, match="set_total_steps: 0: expected an integer >= 1"):
            monitor.set_total_steps(0)
        with pytest.raises(TypeError, match="expected an integer"):
            monitor.set_total_steps(2.5)  # type: ignore[arg-type]
    lines = _console_lines(capsys.readouterr().out)
    assert lines[0].startswith("step 2 |")
    assert lines[1].startswith("step 4/8 (50%) · elapsed ") and " · ETA " in lines[1]


@pytest.mark.parametrize("bad", [0, -5, 2.5, "100", True])
def test_total_steps_config_is_validated(bad: Any) -> None:
    """trainmon.total_steps must be an integer >= 1 (or null); the error names the key."""
    from trainmon.config import load_config
    from trainmon.errors import ConfigError

    with pytest.raises(ConfigError, match="total_steps"):
        load_config({"trainmon": {"total_steps": bad}})


def test_format_duration_is_short_and_rounded() -> None:
    """Durations read like 4.2s, 42s, 12m, 1h05m, 2d03h."""
    from trainmon.writers.console import format_duration

    assert [format_duration(s) for s in (4.24, 42.4, 725, 3900, 183_600)] == [
        "4.2s",
        "42s",
        "12m",
        "1h05m",
        "2d03h",
    ]


def test_live_progress_line_in_a_terminal_and_plain_lines_elsewhere(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``console.live: "on"`` keeps one line rewritten in place (``\\r`` + erase) between the
    window lines, each window line replacing it, and the run ends on a fresh line; "auto" on a
    stream that is not a terminal (here, captured stdout) prints plain lines only."""
    import re
    import time

    def run(live: str) -> str:
        config = {
            "steps_per_print": 10,
            "console": {"enabled": True, "live": live},
            "trainmon": {"total_steps": 20},
        }
        with trainmon.Monitor(config) as monitor:
            for step in range(1, 21):
                time.sleep(0.025)
                monitor.log({"train/loss": 1.0}, step=step)
                if step % 5 == 0:
                    monitor.flush()  # let the background see each step batch
        return capsys.readouterr().out

    plain = run("auto")
    assert "\r" not in plain and "\x1b" not in plain
    assert [line.split(" ")[1] for line in plain.splitlines()] == ["10/20", "20/20"]
    live = run("on")
    assert live.endswith("\n")
    pieces = live.split("\r\x1b[K")
    between = r"step 1[1-9]/20 \(\d+%\) · elapsed \S+ · ETA \S+"
    assert any(re.fullmatch(between, p) for p in pieces), pieces  # live, after a window
    window_lines = [p for p in pieces if "|" in p]
    assert [p.split(" ")[1] for p in window_lines] == ["10/20", "20/20"]
    assert all(p.endswith("\n") for p in window_lines)
