"""The write-path table: one row per contender, the ratio to trainmon, and the team's targets.

Why apart from the script: the rows are medians of samples that came from several worker
processes, and what a row means (per scalar; "call" vs "bg"; spread; the paced rows' bg only)
is decided once, here, for the table, the JSON file and the targets alike.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import harness
from harness import fmt
from write_path.contenders import CONTENDERS, REFERENCE

# Targets set by the team (checked at the end of a run).
TARGET_CALL_US = 0.5
TARGET_RATIO_VS_SUMMARYWRITER = 100.0
TARGET_BACKGROUND_US = 1.0


@dataclass
class Row:
    """One contender's line: µs per scalar, medians over its samples (see ``summarize``)."""

    key: str
    label: str
    scalars: int = 0
    repeats: int = 0
    call_us: float = float("nan")
    call_wall_us: float = float("nan")
    background_us: float = float("nan")
    total_us: float = float("nan")
    finish_ms: float = float("nan")
    spread_pct: float = float("nan")
    dropped: int = 0
    ratio: float = float("nan")
    children_us: float = 0.0
    other_load_pct: float = float("nan")
    unavailable: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)


def summarize(key: str, result: dict[str, Any]) -> Row:
    """A row from a contender's samples (``{"samples": [...]}``), or its reason for none."""
    row = Row(key, CONTENDERS[key].label)
    row.other_load_pct = result.get("other_load_pct", float("nan"))
    if "samples" not in result:
        row.unavailable = result.get("unavailable") or result.get("error") or "no result"
        return row
    samples = result["samples"]
    row.samples = samples
    n = samples[0]["scalars"]
    calls = [s["call_cpu_ns"] / 1e3 / n for s in samples]
    row.scalars = n
    row.repeats = len(samples)
    row.call_us = statistics.median(calls)
    row.call_wall_us = statistics.median(s["call_wall_ns"] / 1e3 / n for s in samples)
    row.background_us = statistics.median(s["background_ns"] / 1e3 / n for s in samples)
    row.total_us = statistics.median(
        (s["call_cpu_ns"] + s["finish_cpu_ns"] + s["background_ns"]) / 1e3 / n for s in samples
    )
    row.finish_ms = statistics.median(s["finish_wall_ns"] / 1e6 for s in samples)
    row.children_us = statistics.median(s["children_ns"] / 1e3 / n for s in samples)
    row.dropped = max(s["dropped"] for s in samples)
    main = calls
    if CONTENDERS[key].paced:  # the calling thread mostly sleeps: only background is meaningful
        main = [s["background_ns"] / 1e3 / n for s in samples]
        row.call_us = row.call_wall_us = row.total_us = float("nan")
    middle = statistics.median(main)
    row.spread_pct = 100 * (max(main) - min(main)) / middle if middle else 0.0
    return row


def add_ratios(rows: dict[str, Row]) -> None:
    """Each row's calling-thread CPU as a multiple of trainmon TB+JSONL's (the reference)."""
    ref = rows[REFERENCE]
    for row in rows.values():
        if not row.unavailable and not ref.unavailable and ref.call_us > 0:
            row.ratio = row.call_us / ref.call_us


def print_table(rows: list[Row]) -> None:
    """The side-by-side table, Markdown, with what its columns mean underneath."""
    headers = (
        "contender",
        "scalars",
        "call CPU µs",
        "call wall µs",
        "bg CPU µs",
        "total CPU µs",
        "× trainmon",
        "close ms",
        "spread",
        "dropped",
        "others",
    )
    lines: list[tuple[str, ...]] = []
    for row in rows:
        if row.unavailable:
            lines.append((row.label, "unavailable: " + row.unavailable[:120]))
            continue
        lines.append(
            (
                row.label,
                f"{row.scalars:,}",
                fmt(row.call_us),
                fmt(row.call_wall_us),
                fmt(row.background_us),
                fmt(row.total_us),
                fmt(row.ratio, 2),
                fmt(row.finish_ms, 1),
                f"±{row.spread_pct / 2:.0f}%",
                str(row.dropped),
                f"{row.other_load_pct:.0f}%",
            )
        )
    harness.print_markdown_table(headers, lines)
    print(
        "\nµs are per scalar, median of the repeats. call = calling thread inside the logging "
        "loop; bg = rest of the process (+ child processes) from the first call until closed; "
        "total = call + close + bg. × trainmon = call CPU / trainmon TB+JSONL's call CPU. "
        "spread = half the min-max range of call CPU (bg CPU for paced rows) across repeats. "
        "Paced rows sleep between steps like a training loop, so only their bg CPU is shown. "
        "others = CPU used by other processes on the machine meanwhile, % of all CPUs."
    )


def print_paired(paired: dict[str, Any]) -> None:
    """trainmon and SummaryWriter back to back in one process: each round's ratio."""
    print("\n## SummaryWriter vs trainmon, back to back in one process (calling-thread CPU)")
    if "pairs" not in paired:
        print("  unavailable:", paired.get("unavailable") or paired.get("error"))
        return
    print(
        f"  {paired['scalars']:,} scalars each; other processes used "
        f"{paired.get('other_load_pct', float('nan')):.0f}% of the CPUs meanwhile"
    )
    for i, p in enumerate(paired["pairs"]):
        print(
            f"  round {i + 1}: trainmon {p['trainmon_call_us']:.3f} µs, SummaryWriter "
            f"{p['summarywriter_call_us']:.1f} µs -> {p['ratio']:.0f}x"
        )
    print(f"  median ratio: {paired['median_ratio']:.0f}x")


def check_targets(
    rows: dict[str, Row], paired: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each target the rows (and the paired ratio) can judge: measured, goal, met."""
    out: list[dict[str, Any]] = []

    def add(what: str, value: float, target: str, ok: bool | None) -> None:
        out.append({"target": what, "measured": value, "goal": target, "met": ok})

    ref = rows.get(REFERENCE)
    if ref and not ref.unavailable:
        add(
            "write_events calling-thread CPU µs/scalar (TB+JSONL)",
            ref.call_us,
            f"<= {TARGET_CALL_US}",
            ref.call_us <= TARGET_CALL_US,
        )
    sw = rows.get("torch_sw")
    if ref and sw and not sw.unavailable and not ref.unavailable:
        add(
            "SummaryWriter.add_scalar / write_events (calling-thread CPU)",
            sw.ratio,
            f">= {TARGET_RATIO_VS_SUMMARYWRITER:.0f}x",
            sw.ratio >= TARGET_RATIO_VS_SUMMARYWRITER,
        )
    if paired and "median_ratio" in paired:
        add(
            "same, measured back to back in one process (median of per-round ratios)",
            paired["median_ratio"],
            f">= {TARGET_RATIO_VS_SUMMARYWRITER:.0f}x",
            paired["median_ratio"] >= TARGET_RATIO_VS_SUMMARYWRITER,
        )
    for key, what in (
        ("trainmon_tb", "TensorBoard only"),
        ("trainmon_jsonl", "JSONL only"),
        ("trainmon_tb_paced", "TensorBoard only, paced"),
        ("trainmon_jsonl_paced", "JSONL only, paced"),
    ):
        row = rows.get(key)
        if row and not row.unavailable:
            add(
                f"background CPU µs/scalar, trainmon with {what}",
                row.background_us,
                f"<= {TARGET_BACKGROUND_US}",
                row.background_us <= TARGET_BACKGROUND_US,
            )
    return out


def print_targets(targets: list[dict[str, Any]], rows: dict[str, Row]) -> None:
    """The verdicts, then each writer's own background cost (the pipeline's subtracted)."""
    print("\n## Targets")
    for t in targets:
        verdict = "MET" if t["met"] else "MISSED"
        print(f"  {verdict:<6} {t['target']}: {fmt(t['measured'], 3)} (goal {t['goal']})")
    null = rows.get("trainmon_null")
    if null and not null.unavailable:
        for key, what in (("trainmon_tb", "TensorBoard"), ("trainmon_jsonl", "JSONL")):
            alone = rows.get(key)
            if alone and not alone.unavailable:
                print(
                    f"         ({what} writer alone, pipeline subtracted: "
                    f"{alone.background_us - null.background_us:.3f} µs/scalar)"
                )
