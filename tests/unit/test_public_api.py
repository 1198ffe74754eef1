"""The public API, ``pikku_workflows.__all__``, is exactly what docs/python-api.md lists at a
glance and in its errors table, and each name has its entry in the reference pages."""

from __future__ import annotations

import re
from pathlib import Path

from django.dispatch import Signal

import pikku_workflows as pw

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def reference() -> set[str]:
    """The names docs/python-api.md lists at a glance (every ``pw.<name>``) and in its
    errors table."""
    page = (ROOT / "docs" / "python-api.md").read_text()
    return set(re.findall(r"`@?pw\.(\w+)", _section(page, "At a glance"))) | set(
        re.findall(r"^\| `(Workflow\w*Error)` \|", _section(page, "Errors"), re.MULTILINE))


def test_all_is_the_reference():
    assert len(pw.__all__) == len(set(pw.__all__))
    assert set(pw.__all__) == reference()


def test_every_public_name_has_its_reference_page():
    """docs/python-api.md for all but the signals, which docs/signals.md lists."""
    docs = ROOT / "docs"
    pages = {"python-api": (docs / "python-api.md").read_text(),
             "signals": (docs / "signals.md").read_text()}
    for name in pw.__all__:
        page = "signals" if isinstance(getattr(pw, name), Signal) else "python-api"
        assert re.search(rf"`[^`\n]*\b{name}\b[^`\n]*`", pages[page]), (name, page)
