"""Regenerate the README's config reference table from the config dataclasses."""

from __future__ import annotations

from pathlib import Path

from trainmon.config import reference_rows

START, END = "<!-- config-table:start -->\n", "<!-- config-table:end -->"


def table() -> str:
    """The markdown table, one row per key."""
    lines = ["| key | accepts | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {t} | `{d}` | {doc} |" for k, t, d, doc in reference_rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    readme = Path(__file__).resolve().parent.parent / "README.md"
    text = readme.read_text()
    head, rest = text.split(START)
    _, tail = rest.split(END)
    readme.write_text(head + START + table() + END + tail)
