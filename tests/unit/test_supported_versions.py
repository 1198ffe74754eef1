"""The versions pyproject admits are the ones docs/supported-versions.md names, and the
suite keeps the code ready for the next Django: its deprecations are errors, in pytest
and at setup."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
from django.utils.deprecation import RemovedInDjango60Warning, RemovedInDjango61Warning
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEPRECATIONS = ("django.utils.deprecation.RemovedInDjango60Warning",
                "django.utils.deprecation.RemovedInDjango61Warning")


def requirement(name: str) -> Requirement:
    [found] = [Requirement(line) for line in PYPROJECT["project"]["dependencies"]
               if Requirement(line).name == name]
    return found


def test_django_5_2_6_0_and_6_1_are_admitted_and_6_2_is_not():
    pin = requirement("django").specifier
    assert [version for version in ("5.1.9", "5.2", "5.2.19", "6.0", "6.1.3", "6.2")
            if pin.contains(version)] == ["5.2", "5.2.19", "6.0", "6.1.3"]
    page = (ROOT / "docs" / "supported-versions.md").read_text()
    assert "`>=5.2,<6.2`" in page and "RemovedInDjango61Warning" in page


def test_rq_3_only():
    pin = requirement("rq").specifier
    assert [v for v in ("2.12.0", "3.0.0", "3.9", "4.0") if pin.contains(v)] == ["3.0.0",
                                                                                  "3.9"]


def test_the_classifiers_name_only_what_is_tested():
    classifiers = PYPROJECT["project"]["classifiers"]
    assert [c for c in classifiers if c.startswith("Framework :: Django ::")] == [
        "Framework :: Django :: 5.2"]
    assert [c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")] \
        == ["Programming Language :: Python :: 3.11"]


def test_djangos_deprecations_are_errors_in_the_suite_wherever_they_come_from():
    filters = PYPROJECT["tool"]["pytest"]["ini_options"]["filterwarnings"]
    # Later entries win: after the ignores of rq's and django_rq's DeprecationWarnings (a
    # RemovedInDjango60Warning is one), so that those modules cannot hide Django's.
    assert filters[-2:] == [f"error::{name}" for name in DEPRECATIONS]
    assert issubclass(RemovedInDjango60Warning, DeprecationWarning)
    with pytest.raises(RemovedInDjango60Warning):
        warnings.warn_explicit("removed in 6.0", RemovedInDjango60Warning, "x.py", 1,
                               module="rq.worker")
    with pytest.raises(RemovedInDjango61Warning):
        warnings.warn_explicit("removed in 6.1", RemovedInDjango61Warning, "x.py", 1,
                               module="django_rq.queues")


@pytest.mark.parametrize("settings_module", ["tests.settings", "demo_project.settings"])
def test_setup_and_checks_raise_no_django_deprecation(settings_module):
    """What pytest's filters cannot see: settings, app loading and the system checks,
    before the first test."""
    # Not ``-W error::django...``: Python cannot import a category's module at startup.
    code = ("import warnings\n"
            "from django.utils.deprecation import RemovedInDjango60Warning as A, "
            "RemovedInDjango61Warning as B\n"
            "warnings.simplefilter('error', A)\nwarnings.simplefilter('error', B)\n"
            "import django\ndjango.setup()\n"
            "from django.core.management import call_command\ncall_command('check')\n"
            "import pikku_workflows.api.urls, pikku_workflows.admin\n"
            "warnings.warn('canary', A)\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    # Only the canary at the end raised: nothing before it did.
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith(
        "RemovedInDjango60Warning: canary"), proc.stderr[-3000:]
