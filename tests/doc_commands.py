"""The example commands of the documentation (docs/**/*.md and README.md), block by block.

A fenced code block's commands are lines that start with `hpcai-launch`, `make`,
`pip install` or `.venv/bin/`; a trailing `# comment` is dropped. A block whose
commands cannot run on a machine without GPUs, Slurm or the system services
says so in an HTML comment on the line before its fence, naming what it needs
and the tests that run those commands:

    <!-- doc-commands: needs=slurm; tested-by=tests/integration/test_slurm_jobs.py -->

Every other block's `hpcai-launch` commands are run by tests/unit/test_docs_commands.py
on a fake GPU node (a workload command as `--dry-run`: every option checked, nothing run).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND_START = ("hpcai-launch ", "make", "pip install", ".venv/bin/")
ANNOTATION = re.compile(r"^<!--\s*doc-commands:\s*(.*?)\s*-->$")
NEEDS = {"gpu", "slurm", "root", "apptainer", "registry", "data", "build-host", "setup", "plugin"}


@dataclass
class Block:
    path: Path
    line: int
    commands: list[str]
    needs: set[str] = field(default_factory=set)
    tested_by: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def command_of(line: str) -> str | None:
    text = line.strip()
    if not text.startswith(COMMAND_START):
        return None
    # `cmd   # why`: the comment starts at a `#` after whitespace (a cap list has none).
    return re.split(r"\s+#\s", text, maxsplit=1)[0].strip()


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    inside = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            if not inside:
                previous = next((t.strip() for t in reversed(lines[:number - 1]) if t.strip()), "")
                block = Block(path, number, [])
                match = ANNOTATION.match(previous)
                if match:
                    parse_annotation(block, match.group(1))
                found.append(block)
            inside = not inside
            continue
        if inside:
            command = command_of(line)
            if command:
                found[-1].commands.append(command)
    return [b for b in found if b.commands]


def parse_annotation(block: Block, text: str) -> None:
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, _, value = part.partition("=")
        if key == "needs":
            block.needs = set(value.split(","))
        elif key == "tested-by":
            block.tested_by = value.split()
        else:
            raise ValueError(f"{block.where}: unknown doc-commands key {key!r} (needs=..., tested-by=...)")


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path)]


def launcher_args(command: str) -> list[str]:
    """`hpcai-launch resnet50 --cap 300` -> ['resnet50', '--cap', '300']."""
    words = shlex.split(command)
    assert words[0] == "hpcai-launch", command
    return words[1:]
