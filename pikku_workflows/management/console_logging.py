"""The long-running commands' log lines on the console (``pikku_worker``, ``pikku_scheduler``)."""

from __future__ import annotations

import logging


def log_to_console(verbosity: int) -> None:
    """One line per run state change on stderr, unless the project configured logging.

    A ``pikku_workflows`` logger given a level or handlers by ``LOGGING`` is left exactly
    as configured. Otherwise the logger logs at INFO (WARNING with ``-v 0``), through the
    project's root handlers when there are some (a handler of its own too would print
    every line twice), else through a stderr handler of its own.
    """
    logger = logging.getLogger("pikku_workflows")
    if logger.level != logging.NOTSET or logger.handlers:
        return
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity >= 1 else logging.WARNING)
