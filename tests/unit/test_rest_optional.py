"""The REST framework is optional (the `rest` extra): only ``pikku_workflows.api`` imports
it. A project whose venv cannot import it migrates, runs workflows, reads them back, runs
the commands and serves the admin's pages; a project that mounts the API's URLs without
the REST framework's apps installed is warned by ``manage.py check`` (W002).

The same project runs against the wheel installed without extras in
``test_packaging.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.unit import minimal_project
from tests.unit.docs_blocks import ROOT

REST_PACKAGES = ["rest_framework", "django_filters", "drf_spectacular"]


def _environment() -> dict[str, str]:
    # The project's own settings, not the suite's.
    return {key: value for key, value in os.environ.items()
            if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH")
            and not key.startswith("PIKKU_")}


def _run_script(project: Path, prelude: str = "") -> str:
    result = subprocess.run([sys.executable, "-c", prelude + minimal_project.SCRIPT],
                            cwd=project, env=_environment(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_app_works_when_the_rest_framework_cannot_be_imported(tmp_path):
    minimal_project.write(tmp_path)
    printed = _run_script(tmp_path, prelude=minimal_project.BLOCK_REST)
    assert printed.splitlines() == ["check: System check identified no issues (0 silenced).",
                                    "ok"], printed


def test_check_warns_when_the_api_is_mounted_without_its_apps(tmp_path):
    minimal_project.write(tmp_path, api=True)
    result = subprocess.run([sys.executable, "-c", (
        "import os, sys; sys.path.insert(0, os.getcwd());"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'settings';"
        "import django; django.setup();"
        "from django.core.management import call_command; call_command('check')")],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pikku_workflows.W002" in result.stderr, result.stderr
    assert "INSTALLED_APPS lacks 'rest_framework', 'django_filters'" in result.stderr


def test_the_import_contract_covers_every_module_but_the_api():
    """A new top-level module of the package falls under the contract that keeps the REST
    framework in ``pikku_workflows.api`` (import-linter only checks the modules it names)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["include_external_packages"] is True
    [contract] = [c for c in config["contracts"]
                  if c["name"] == "The REST framework stays in pikku_workflows.api"]
    assert contract["type"] == "forbidden"
    assert contract["forbidden_modules"] == REST_PACKAGES
    package = ROOT / "pikku_workflows"
    modules = {f"pikku_workflows.{path.stem}" for path in package.glob("*.py")
               if path.stem != "__init__"}
    modules |= {f"pikku_workflows.{path.parent.name}" for path in package.glob("*/__init__.py")}
    assert set(contract["source_modules"]) == modules - {"pikku_workflows.api"}


def test_the_package_metadata_keeps_the_rest_framework_in_its_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [requirement.split(">")[0].split("<")[0].split("[")[0]
             for requirement in project["dependencies"]]
    assert names == ["django", "django-rq", "rq", "redis", "cronsim"]
    assert [requirement.split(">")[0] for requirement in
            project["optional-dependencies"]["rest"]] == [
        "djangorestframework", "django-filter", "drf-spectacular"]
