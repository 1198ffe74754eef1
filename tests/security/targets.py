"""Functions a forged queue message might name: each leaves a mark if it ever runs.

None of them is a pikku job function, so a pikku_worker must refuse every job naming
one (the mark is a file, visible across processes, not a mock).
"""

from __future__ import annotations

from pathlib import Path


def leave_mark(path: str) -> str:
    """Write ``path``: proof that this function ran."""
    Path(path).write_text("ran")
    return "ran"
