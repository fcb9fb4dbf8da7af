"""The README stays a short front page, and the documentation site builds without a broken link."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainmon.config import reference_rows

ROOT = Path(__file__).resolve().parent.parent
DEMO_COMMAND = "bash scripts/setup.sh && .venv/bin/trainmon demo"
TEST_COMMAND = "bash scripts/test.sh"


def test_readme_is_short_and_names_both_set_up_commands() -> None:
    """The README fits in 250 lines and shows the demo and test commands that CI relies on."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert DEMO_COMMAND in readme
    assert TEST_COMMAND in readme
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text()


def test_readme_links_point_at_existing_pages() -> None:
    """Every docs/ page the README links to exists."""
    readme = (ROOT / "README.md").read_text()
    linked = {part.split(")")[0] for part in readme.split("](docs/")[1:]}
    assert linked, "the README links into the docs"
    for page in linked:
        assert (ROOT / "docs" / page.split("#")[0]).is_file(), page


@pytest.mark.slow
def test_site_builds_strict_with_the_generated_config_reference(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes, and the built config page lists every config key."""
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "config" / "index.html").read_text()
    for key, *_ in reference_rows():
        assert html.escape(key, quote=False) in page, key
    api = (site / "api" / "index.html").read_text()
    assert "trainmon.Monitor" in api and "write_events" in api
