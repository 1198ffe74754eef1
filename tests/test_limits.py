"""Limits and bad values at the edges of the commands: clear errors, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pikku_prune_names_the_statuses_it_accepts():
    """argparse used to list the enum members' reprs (RunStatus.CANCELLED, ...)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "pikku_prune", "--older-than", "30d", "--status", "bogus"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert "invalid choice: 'bogus' (choose from 'cancelled', 'completed', 'failed')" in done.stderr
