"""Per-thread batches: calls made inside a block are collected and handled at its end."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Batch(threading.local):
    """The items collected by this thread's open ``collecting`` block (none outside one)."""

    def __init__(self, flush: Callable[[list[Any]], None]) -> None:
        self.items: list[Any] | None = None
        self.flush = flush

    def add(self, item: Any) -> bool:
        """Collect ``item`` if a block is open; False if none is (act on it at once)."""
        if self.items is None:
            return False
        self.items.append(item)
        return True

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Collect in this block; the outermost block hands its items to ``flush`` at its
        end, even when the block raises (what was collected did happen)."""
        if self.items is not None:
            yield
            return
        self.items = []
        try:
            yield
        finally:
            items, self.items = self.items, None
            if items:
                self.flush(items)
