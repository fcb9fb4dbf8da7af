"""MkDocs hook: the config reference page's table is generated from the schema at build time.

The field declarations in ``trainmon.config`` are the one source of truth; the page holds only
a ``<!-- config-table -->`` marker, so the table cannot go stale.
"""

from __future__ import annotations

from typing import Any

from trainmon.config import reference_rows

MARKER = "<!-- config-table -->"


def config_table() -> str:
    """The markdown table, one row per key, in the schema's order."""
    lines = ["| key | accepts | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {t} | `{d}` | {doc} |" for k, t, d, doc in reference_rows()]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker on the config page with the generated table."""
    if MARKER in markdown:
        return markdown.replace(MARKER, config_table())
    return markdown
