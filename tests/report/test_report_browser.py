"""The report in a real browser (headless Chromium): it draws every chart, logs no error, and
the screenshot is not blank. Skipped when Chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from trainmon.report import load_run, write_report

pytestmark = pytest.mark.slow

CHROMIUM = next(
    (
        p
        for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
        if p and Path(p).exists()
    ),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (apt-get install -y --no-install-recommends chromium)",
)


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium offline (every host name unresolvable) with a fresh profile."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--virtual-time-budget=10000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def dump_dom(page: Path, tmp_path: Path, fragment: str = "") -> str:
    """The DOM after the page's scripts ran."""
    result = chromium(["--dump-dom", page.as_uri() + fragment], tmp_path / "profile-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def screenshot(page: Path, tmp_path: Path) -> bytes:
    """A 1400x2000 PNG screenshot of the page."""
    shot = tmp_path / "shot.png"
    result = chromium(
        [f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
        tmp_path / "profile-shot",
    )
    assert shot.exists(), result.stderr[-2000:]
    return shot.read_bytes()


def png_rgb(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) with zlib."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    stride = width * channels
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), np.uint8)
    previous = np.zeros(stride, np.int64)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if kind == 0:
            row = line
        elif kind == 1:  # Sub: running sum per channel
            row = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            row = (line + previous) % 256
        else:  # Average or Paeth: each byte depends on the decoded byte to its left
            values, above = line.tolist(), previous.tolist()
            decoded = [0] * stride
            for i in range(stride):
                a = decoded[i - channels] if i >= channels else 0
                b = above[i]
                if kind == 3:
                    decoded[i] = (values[i] + (a + b) // 2) % 256
                else:
                    c = above[i - channels] if i >= channels else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                    decoded[i] = (values[i] + pred) % 256
            row = np.array(decoded, np.int64)
        out[y] = row
        previous = row
    return out.reshape(height, width, channels)[:, :, :3]


def attribute(dom: str, element: str, name: str) -> str:
    """An attribute of the first ``element`` tag in the dumped DOM."""
    match = re.search(rf"<{element}\b[^>]*\b{name}=\"([^\"]*)\"", dom)
    assert match is not None, f"no {element}[{name}]"
    return match.group(1)


def figures(dom: str) -> list[dict[str, str]]:
    """Each chart figure's attributes."""
    found = []
    for tag in re.findall(r"<figure\b[^>]*>", dom):
        found.append(dict(re.findall(r'([\w-]+)="([^"]*)"', tag)))
    return found


def build_runs(base: Path) -> list[Path]:
    """Two trainmon runs (every family, alerts, NaN, cross-rank) and a DeepSpeed TB folder."""
    from test_report_loading import deepspeed_folder
    from test_report_summary import alert, build_run, write_alerts

    build_run(base, "run-a", 150, seed=1)
    build_run(base, "run-b", 120, seed=2, slow=1.3)
    write_alerts(
        base / "run-a", [alert("slow-step", "firing", 50), alert("slow-step", "resolved", 70)]
    )
    journal = base / "run-a" / "metrics.jsonl"
    extra = [
        {
            "v": 1,
            "kind": "scalars",
            "step": 150,
            "time": 2e9,
            "values": {
                "comm/all_reduce/latency_ms": 1.5,
                "comm/all_reduce/busbw_gbps": 80.0,
                "custom</script>metric": 3.0,
            },
        },
    ]
    with open(journal, "a") as f:
        for record in extra:
            f.write(json.dumps(record) + "\n")
    deepspeed_folder(base / "ds", steps=80)
    return [base / "run-a", base / "run-b", base / "ds"]


@needs_chromium
def test_every_chart_draws_without_errors_and_the_page_is_not_blank(tmp_path: Path) -> None:
    """Three runs (two trainmon journals, one DeepSpeed TensorBoard folder) in one report:
    the page's scripts finish with no error, each family has its section, every chart
    figure is drawn (painted pixels in its canvas), and the screenshot has real content."""
    runs = [load_run(p) for p in build_runs(tmp_path)]
    page = write_report(runs, tmp_path / "report.html")
    dom = dump_dom(page, tmp_path)
    assert attribute(dom, "body", "data-ready") == "1"
    assert attribute(dom, "body", "data-errors") == "0", re.findall(
        r'id="errors"[^>]*>([^<]*)', dom
    )
    charts = figures(dom)
    families = {f["data-family"] for f in charts}
    assert families == {"train", "eval", "perf", "mem", "comm", "other"}
    for family in families:
        assert f'<section class="family" id="{family}"' in dom
    assert all(f.get("data-rendered") == "1" for f in charts), charts
    assert all(int(f.get("data-ink", "0")) > 1000 for f in charts), charts
    assert int(attribute(dom, "body", "data-charts")) == len(charts)
    assert {f["data-kind"] for f in charts} == {"lines", "stacked", "band"}
    assert dom.count('class="uplot') >= len(charts)
    pixels = png_rgb(screenshot(page, tmp_path)).astype(np.float64)
    gray = pixels.mean(axis=2)
    assert gray.var() > 200, gray.var()
    assert (gray < 200).mean() > 0.02  # text, axes and lines, not a white page
    colours = np.unique(pixels.reshape(-1, 3)[::7], axis=0)
    assert len(colours) > 50


@needs_chromium
def test_the_demo_style_single_run_report_draws(tmp_path: Path) -> None:
    """A run with a NaN loss and an alert draws without error; the NaN is in the chart data
    and the page still finishes."""
    from test_report_summary import alert, build_run, write_alerts

    build_run(tmp_path, "solo", 60, seed=3)
    write_alerts(tmp_path / "solo", [alert("nan-grad", "firing", 17)])
    page = write_report([load_run(tmp_path / "solo")], tmp_path / "solo.html")
    dom = dump_dom(page, tmp_path)
    assert attribute(dom, "body", "data-errors") == "0"
    assert attribute(dom, "body", "data-ready") == "1"
    assert all(f.get("data-rendered") == "1" for f in figures(dom))


@needs_chromium
def test_zoom_hover_reset_and_log_scale_raise_no_error(tmp_path: Path) -> None:
    """The page's self-test (zoom each chart, hover, reset zoom, toggle log scale) runs with
    no error, zoom narrows every chart and reset restores every chart's full range."""
    page = write_report([load_run(p) for p in build_runs(tmp_path)[:2]], tmp_path / "r.html")
    dom = dump_dom(page, tmp_path, "#trainmon-selftest")
    assert attribute(dom, "body", "data-errors") == "0"
    count = len(figures(dom))
    assert attribute(dom, "body", "data-selftest") == f"zoomed {count} reset {count} of {count}"
