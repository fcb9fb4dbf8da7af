"""The CLI on big and bad inputs: report targets that are not regular files, tail of a long
journal, a report of very many runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trainmon.cli import main


def _journal(folder: Path, steps: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"v": 1, "kind": "scalars", "step": s, "time": float(s), "values": {"x": 1 / s}})
        for s in range(1, steps + 1)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_report_refuses_a_device_node_and_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o /dev/null (a character device) and -o FIFO are refused with exit 1, naming what
    they are; both are still what they were afterwards."""
    run = _journal(tmp_path / "run")
    before = os.stat("/dev/null")
    assert main(["report", str(run), "-o", "/dev/null"]) == 1
    err = capsys.readouterr().err
    assert "/dev/null" in err and "character device" in err and "not a regular file" in err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["report", str(run), "-o", str(fifo)]) == 1
    assert "named pipe" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert main(["report", str(run), "-o", str(folder)]) == 1
    assert "a folder" in capsys.readouterr().err


def test_report_writes_through_a_symlink_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink to a regular file stays a link; the file it points to gets the report; a
    link to a device or a dangling link is refused."""
    run = _journal(tmp_path / "run")
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert main(["report", str(run), "-o", str(link)]) == 0
    out = capsys.readouterr().out
    assert f"through the symlink {link}" in out and str(real) in out
    assert link.is_symlink() and "<html" in real.read_text()
    to_device = tmp_path / "null.html"
    to_device.symlink_to("/dev/null")
    assert main(["report", str(run), "-o", str(to_device)]) == 1
    assert "symlink" in capsys.readouterr().err and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "missing" / "x.html")
    assert main(["report", str(run), "-o", str(dangling)]) == 1
    assert "dangling" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


_READ_BYTES = """
import sys
from trainmon.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
rchar = next(l for l in open("/proc/self/io") if l.startswith("rchar:"))
print("@@" + rchar.split()[1], file=sys.stderr)
raise SystemExit(code)
"""


def _tail(*args: str) -> tuple[list[str], int]:
    """``trainmon tail ARGS`` in a subprocess: its lines and the bytes it read (all files)."""
    done = subprocess.run(
        [sys.executable, "-c", _READ_BYTES, "tail", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    read = int(next(x for x in done.stderr.splitlines() if x.startswith("@@"))[2:])
    return done.stdout.splitlines(), read


def test_tail_n_reads_the_end_of_a_long_journal_not_all_of_it(tmp_path: Path) -> None:
    """A 40 MB journal whose windows are at its end: ``tail -n 5`` prints the same 5 lines as
    the last 5 of ``tail -n 0`` (everything), and reads a small part of the file (the bytes
    counted include the interpreter's own imports, about 4 MB)."""
    import trainmon

    config = {
        "steps_per_print": 10,
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "console": {"enabled": False},
    }
    with trainmon.Monitor(config) as monitor:
        for step in range(1, 101):
            monitor.step = step
            monitor.write_events([("train/loss", 1.0 / step), ("perf/step_time_ms", 30.0)])
    journal = tmp_path / "job" / "metrics.jsonl"
    meta, *rest = journal.read_bytes().split(b"\n", 1)
    pad = b'{"v": 1, "kind": "scalars", "step": 0, "time": 1.0, "values": {"x": 1.0}}\n'
    padding = pad * (40_000_000 // len(pad))
    journal.write_bytes(meta + b"\n" + padding + b"".join(rest))
    size = journal.stat().st_size
    everything, _ = _tail(str(journal), "-n", "0")
    last, read = _tail(str(journal), "-n", "5")
    assert len(everything) == 10 and last == everything[-5:]
    assert read < size / 4, f"read {read:,} bytes of a {size:,}-byte journal"


def test_a_report_of_a_thousand_runs_warns_and_stays_small(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1000 runs: a warning on stderr, the first runs charted, the rest listed by name, and a
    page a browser opens (well under the ~90 MB of charting them all)."""
    from trainmon.report.html import MAX_CHARTED_RUNS

    paths = [str(_journal(tmp_path / f"run{i:04d}", steps=200)) for i in range(1000)]
    out = tmp_path / "r.html"
    assert main(["report", *paths, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: 1000 runs given" in err and f"first {MAX_CHARTED_RUNS}" in err
    page = out.read_text()
    assert out.stat().st_size < 3_000_000
    assert "990 runs not charted" in page and "run0999" in page
    data = page.split('id="trainmon-data">', 1)[1].split("</script>", 1)[0]
    assert data.count('"name"') >= MAX_CHARTED_RUNS and "run0011" not in data


_PEAK = """
import resource, sys
from trainmon.report import load_run, summarize
before = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
run = load_run(sys.argv[1])
summary = summarize(run)
# VmHWM: this process's own peak (ru_maxrss would include the parent's at fork time)
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
peak = int(hwm.split()[1]) * 1024
print(run.scalar_count, before, peak)
"""


def test_summary_of_a_journal_needs_less_memory_than_the_journal(tmp_path: Path) -> None:
    """A 40 MB journal (ten metrics a step, a window every 50 steps): the memory summary adds
    over the interpreter and imports stays under 3/4 of the file's size (it was ~3.9x)."""
    import orjson

    journal = tmp_path / "job" / "metrics.jsonl"
    journal.parent.mkdir()
    names = [f"Train/Samples/metric_{i}" for i in range(10)]
    steps = 0
    with open(journal, "wb") as f:
        f.write(b'{"v": 1, "kind": "meta", "time": 1.0, "job": "job"}\n')
        while f.tell() < 40_000_000:
            lines = []
            for _ in range(1000):
                steps += 1
                values = {n: steps * 1.000001 + i for i, n in enumerate(names)}
                lines.append(
                    orjson.dumps({"v": 1, "kind": "scalars", "step": steps, "values": values})
                )
                if steps % 50 == 0:
                    stats = {n: {"count": 50, "mean": 1.5, "min": 1.0, "max": 2.0} for n in names}
                    lines.append(orjson.dumps({"v": 1, "kind": "window", "stats": stats}))
            f.write(b"\n".join(lines) + b"\n")
    size = journal.stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(journal)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    scalars, before, peak = map(int, done.stdout.split())
    assert scalars == steps * len(names)
    assert peak - before < size * 0.75, (
        f"{(peak - before) / 1e6:.0f} MB for a {size / 1e6:.0f} MB file"
    )
