"""The fenced code blocks of the documentation, and the directives that say how to test them.

A directive is an HTML comment (invisible on the rendered page) right before a fenced
block, only blank lines between them::

    <!-- test: skip REASON -->            the block is not run (a fragment, a shell session)
    <!-- test: scenario NAME -->          the block runs in scenario NAME: the scenario's
                                          blocks of one page run in order, in one namespace
                                          (an ``sh`` block's ``python manage.py`` lines run
                                          through call_command)
    <!-- test: settings -->               a settings snippet: executed, its PIKKU_WORKFLOWS
                                          validated, its INSTALLED_APPS checked
    <!-- test: urls -->                   a urls.py snippet: executed with path and include
    <!-- test: output -->                 (before a text block) the exact stdout of the block
                                          before it; ``...`` stands for any text
    <!-- test: tutorial PATH [append] -->  a file of the tutorial's project
    <!-- test: tutorial run|background|shell -->  commands / shell input of the tutorial

A directive's comment may carry Python after its first line: hidden code run just before
the block (setup the reader does not need to see). A standalone ``<!-- test: check``
comment with code runs after the block before it (hidden assertions on what a comment in
the block claims). A ``python`` block without a directive runs on its own.

``tests/unit/test_docs.py`` runs the Python blocks and ``tests/unit/test_packaging.py``
the tutorial.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"skip", "scenario", "settings", "urls", "output", "tutorial", "check"}
_FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>[\w-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*test:\s*(?P<head>.*?)\s*(?P<end>-->)?\s*$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    kind: str | None = None
    args: list[str] = field(default_factory=list)
    hidden: str = ""  # code run before the block
    checks: list[tuple[int, str]] = field(default_factory=list)  # code run after it
    output: str | None = None  # expected stdout

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documentation_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def parse(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with their directives attached."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str, list[str], str] | None = None  # line, kind, args, hidden code
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if match:
            start = i
            body: list[str] = []
            if not match["end"]:
                i += 1
                while i < len(lines) and lines[i].strip() != "-->":
                    body.append(lines[i])
                    i += 1
                if i == len(lines):
                    raise ValueError(f"{path}:{start + 1}: unterminated test directive")
            words = match["head"].split()
            if not words or words[0] not in KINDS:
                raise ValueError(f"{path}:{start + 1}: unknown test directive {match['head']!r}")
            if words[0] == "check":
                if not blocks:
                    raise ValueError(f"{path}:{start + 1}: a check needs a block before it")
                blocks[-1].checks.append((start + 2, "\n".join(body)))
            else:
                if pending is not None:
                    raise ValueError(f"{path}:{pending[0]}: a directive without its block")
                pending = (start + 1, words[0], words[1:], "\n".join(body))
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if fence:
            start = i
            close = fence["fence"]
            i += 1
            code: list[str] = []
            while i < len(lines) and lines[i].rstrip() != close:
                code.append(lines[i])
                i += 1
            block = Block(path, start + 1, fence["lang"], "\n".join(code) + "\n")
            if pending is not None:
                block.kind, block.args, block.hidden = pending[1], pending[2], pending[3]
                pending = None
            if block.kind == "output":
                if not blocks:
                    raise ValueError(f"{block.where}: an output block needs a block before it")
                blocks[-1].output = block.code
            else:
                blocks.append(block)
            i += 1
            continue
        if pending is not None and lines[i].strip():
            raise ValueError(f"{path}:{pending[0]}: a test directive must come right "
                             "before its fenced block")
        i += 1
    if pending is not None:
        raise ValueError(f"{path}:{pending[0]}: a directive without its block")
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in documentation_files() for block in parse(path)]


def output_matches(expected: str, actual: str) -> bool:
    """``expected`` with ``...`` standing for any text (across lines) equals ``actual``."""
    parts = [re.escape(part) for part in expected.strip().split("...")]
    return re.fullmatch(".*?".join(parts), actual.strip(), re.DOTALL) is not None
