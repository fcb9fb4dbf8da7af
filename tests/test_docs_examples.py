"""Every ```python block of the README and the getting-started page runs as written.

Each block runs in its own process, in a fresh temporary folder, with W&B offline and DeepSpeed on
the CPU. Two HTML comments on the line right before a fence change that:
``<!-- docs-test: skip (reason) -->`` skips the block with that reason (a block that needs a GPU
or a server), and ``<!-- docs-test: continues -->`` runs the block after the one before it in
the same file, as one script. :data:`EXPECTED` says what a block leaves behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainmon.report import load_run

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/getting-started.md")
TIMEOUT_S = 280  # under pytest's 300 s, so a hanging block fails with its output shown

FENCE = re.compile(r"^(\s*)```python\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip(?:\s*\((?P<reason>.*)\))?$")


@dataclass(frozen=True)
class Block:
    """One ```python block: ``id`` is ``file:number`` (numbered from 1 in its file)."""

    id: str
    code: str  # with the blocks it continues in front
    skip: str | None = None


@dataclass
class Expect:
    """What a block leaves in its folder besides exiting 0."""

    runs: dict[str, int] = field(default_factory=dict)
    """Run folder (journal or TensorBoard events) → how many steps of ``train/loss`` it holds."""
    files: tuple[str, ...] = ()
    """Glob patterns, each matching at least one non-empty file."""
    torchrun: bool = False
    """Started as ``torchrun --standalone --nproc_per_node=1 script.py``, as the doc says."""
    slow: bool = False


TB_SEED = "logs/tb/ds-monitor-demo"
WANDB_OFFLINE = "wandb/offline-run-*/run-*.wandb"

#: Blocks not named here only have to exit 0.
EXPECTED: dict[str, Expect] = {
    "README.md:1": Expect(runs={TB_SEED: 100}, files=(WANDB_OFFLINE,)),
    "README.md:2": Expect(runs={"runs/plain": 100}),
    "README.md:3": Expect(runs={"logs/run1": 10}, torchrun=True, slow=True),
    "README.md:4": Expect(runs={"runs/hf": 20}, slow=True),
    "docs/getting-started.md:1": Expect(runs={TB_SEED: 100}, files=(WANDB_OFFLINE,)),
}


def extract_blocks(text: str, name: str) -> list[Block]:
    """The ```python blocks of ``text`` (the file ``name``), with their directives applied."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent = fence.group(1)
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{name}:{i + 1}: a ```python fence is never closed")
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        block_id = f"{name}:{len(blocks) + 1}"
        skip = None
        directive = DIRECTIVE.match(lines[i - 1]) if i > 0 else None
        what = directive.group("what") if directive else ""
        if what == "continues":
            if not blocks:
                raise ValueError(f"{block_id} continues, but no block comes before it")
            before = blocks[-1]
            code = before.code + "\n" + code
            if before.skip is not None:
                skip = f"continues {before.id}, which is skipped: {before.skip}"
        elif skipped := SKIP.match(what):
            skip = skipped.group("reason") or "marked skip in the docs"
        elif what:
            raise ValueError(f"{block_id}: unknown directive <!-- docs-test: {what} -->")
        blocks.append(Block(block_id, code, skip))
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    """The blocks of every page in :data:`PAGES`."""
    return [b for page in PAGES for b in extract_blocks((ROOT / page).read_text(), page)]


def block_params() -> list[object]:
    """One pytest parameter per block, skipped or marked slow as the docs and EXPECTED say."""
    params: list[object] = []
    for block in all_blocks():
        marks: list[pytest.MarkDecorator] = []
        if block.skip is not None:
            marks.append(pytest.mark.skip(reason=f"{block.id}: {block.skip}"))
        if EXPECTED.get(block.id, Expect()).slow:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def block_env() -> dict[str, str]:
    """The environment a block runs in: W&B offline, DeepSpeed on the CPU with its JIT-built
    ops cached in the venv, and W&B writing under the block's own folder."""
    env = dict(os.environ, WANDB_MODE="offline", DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".venv" / "torch_extensions"))
    env.pop("WANDB_DIR", None)
    return env


@pytest.mark.parametrize("block", block_params())
def test_block_runs_and_writes_what_it_promises(block: Block, tmp_path: Path) -> None:
    """The block exits 0 in a fresh folder and leaves there the runs and files it promises."""
    expect = EXPECTED.get(block.id, Expect())
    script = tmp_path / "docs_block.py"
    script.write_text(block.code)
    command = [sys.executable, str(script)]
    if expect.torchrun:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=block_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = f"{block.id} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert done.returncode == 0, output
    for folder, steps in expect.runs.items():
        assert (tmp_path / folder).is_dir(), f"{block.id}: no run folder {folder}\n{output}"
        run = load_run(tmp_path / folder)
        assert "train/loss" in run.series, f"{block.id}: {folder} has no train/loss"
        assert len(run.series["train/loss"].steps) == steps, (block.id, folder)
    for pattern in expect.files:
        found = [p for p in tmp_path.glob(pattern) if p.is_file() and p.stat().st_size > 0]
        assert found, f"{block.id}: nothing matches {pattern}\n{output}"


def test_every_expectation_names_a_block_of_the_docs() -> None:
    """Each key of EXPECTED is the id of a ```python block, so renumbered blocks fail here."""
    ids = {block.id for block in all_blocks()}
    assert ids, "the pages hold ```python blocks"
    assert set(EXPECTED) <= ids, sorted(set(EXPECTED) - ids)


def test_directives_skip_join_and_reject_unknown_words() -> None:
    """A skip comment skips with its reason, a continues comment prepends the block before it,
    and any other docs-test comment is an error rather than silently ignored."""
    text = "\n".join(
        [
            "```python",
            "a = 1",
            "```",
            "<!-- docs-test: continues -->",
            "```python",
            "b = a",
            "```",
            "<!-- docs-test: skip (needs a GPU) -->",
            "```python",
            "c = 3",
            "```",
            "<!-- docs-test: continues -->",
            "   ```python",
            "   d = c",
            "   ```",
            "```bash",
            "echo not python",
            "```",
        ]
    )
    blocks = extract_blocks(text, "page.md")
    assert [b.id for b in blocks] == ["page.md:1", "page.md:2", "page.md:3", "page.md:4"]
    assert blocks[1].code == "a = 1\n\nb = a\n" and blocks[1].skip is None
    assert blocks[2].skip == "needs a GPU"
    assert blocks[3].code == "c = 3\n\nd = c\n"
    assert blocks[3].skip == "continues page.md:3, which is skipped: needs a GPU"
    with pytest.raises(ValueError, match="unknown directive"):
        extract_blocks("<!-- docs-test: skipp -->\n```python\nx = 1\n```\n", "bad.md")
    with pytest.raises(ValueError, match="no block comes before"):
        extract_blocks("<!-- docs-test: continues -->\n```python\nx = 1\n```\n", "bad.md")
