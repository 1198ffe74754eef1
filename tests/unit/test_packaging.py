"""The wheel, installed into a fresh virtual environment, runs the demo's workflows and
the tutorial literally (with its `rest` extra); installed without extras, it runs a
project's workflows, commands and admin pages with Django, rq, django-rq and redis alone.

``python -m build`` makes the wheel; a plain venv (no system site packages, so a missing
dependency fails here) installs it with pip; then docs/tutorial.md is followed block by
block in an empty directory: ``django-admin startproject``, the settings and
``workflows.py`` it shows, the commands it runs (their output compared with the page's),
the shell session, and the worker part when Redis answers. About a minute; it runs in
the SQLite pass of ``make test`` (it does not use the test database).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.conf import settings

from tests.services import wait_for
from tests.unit import minimal_project
from tests.unit.docs_blocks import ROOT, Block, output_matches, parse

# It uses its own SQLite database: `make test` runs it once, in the SQLite pass (the
# PostgreSQL pass deselects the `packaging` marker).
pytestmark = pytest.mark.packaging

TUTORIAL_REDIS = "redis://127.0.0.1:6379/0"
PACKAGED = [
    "pikku_workflows/py.typed",
    "pikku_workflows/migrations/0001_initial.py",
    "pikku_workflows/static/pikku_workflows/console.css",
    "pikku_workflows/static/pikku_workflows/console.js",
    "pikku_workflows/templates/admin/pikku_workflows/workflowrun/run_page.html",
    "pikku_workflows/templates/admin/pikku_workflows/workflows/index.html",
]


def _run(argv: list[str], *, cwd: Path, env: dict, input: str | None = None,
         timeout: float = 300) -> str:
    result = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(argv)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _redis_available(url: str) -> bool:
    import redis

    try:
        connection = redis.Redis.from_url(url, socket_connect_timeout=1)
        connection.ping()
        connection.flushdb()
        return True
    except redis.RedisError:
        return False


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
         cwd=ROOT, env=dict(os.environ))
    [built] = out.glob("pikku_workflows-*.whl")
    return built


def test_the_wheel_holds_templates_static_files_migrations_and_py_typed(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in PACKAGED if name not in names]
    assert not missing, f"not in {wheel.name}: {missing}"
    assert not [name for name in names if name.startswith(("tests/", "demo_project/"))]
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Classifier: Framework :: Django :: 5.2" in text
    # The optional extras: Prometheus, and Swagger UI's assets for the API's docs.
    assert "Provides-Extra: metrics" in text and "Provides-Extra: swagger-ui" in text
    assert "Requires-Dist: drf-spectacular-sidecar>=2024.1; extra == 'swagger-ui'" in text
    # The REST API's packages come with the `rest` extra only.
    assert "Provides-Extra: rest" in text
    for name in ("djangorestframework>=3.15", "django-filter>=24", "drf-spectacular>=0.28"):
        assert f"Requires-Dist: {name}; extra == 'rest'" in text
    required = sorted(line.split(": ", 1)[1] for line in text.splitlines()
                      if line.startswith("Requires-Dist: ") and "extra ==" not in line)
    assert required == ["cronsim>=2.6", "django-rq>=3", "django<6.2,>=5.2", "redis>=5",
                        "rq<4,>=3"], required


def _venv_with(requirement: str, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh venv with ``requirement`` installed: its bin directory and the environment."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv, env=dict(os.environ))
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "DATABASE_URL", "VIRTUAL_ENV",
                        "REDIS_URL")
           and not k.startswith("PIKKU_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", requirement],
         cwd=venv, env=env)
    return bin_dir, env


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """The wheel with its `rest` extra (the demo and the tutorial use the REST API)."""
    return _venv_with(f"{wheel}[rest]", tmp_path_factory)


def test_the_wheel_without_extras_runs_workflows_commands_and_the_admin(wheel,
                                                                         tmp_path_factory,
                                                                         tmp_path):
    """Installed alone, the wheel brings Django, rq, django-rq and redis (and their own
    dependencies), not the REST framework; a project without the API runs a workflow,
    reads it back, runs the commands and serves the admin's run page and history."""
    bin_dir, env = _venv_with(str(wheel), tmp_path_factory)
    python = str(bin_dir / "python")
    where = _run([python, "-c", "import pikku_workflows; print(pikku_workflows.__file__)"],
                 cwd=tmp_path, env=env)
    assert str(bin_dir.parent) in where, where
    listed = _run([python, "-m", "pip", "list", "--format=freeze"], cwd=tmp_path, env=env)
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert {"django", "rq", "django-rq", "redis", "pikku-workflows"} <= names, names
    assert not names & {"djangorestframework", "django-filter", "drf-spectacular", "rich",
                        "psycopg"}, names
    for module in ("rest_framework", "django_filters", "drf_spectacular"):
        found = _run([python, "-c", "import importlib.util, sys; "
                      f"print(importlib.util.find_spec({module!r}) is None)"],
                     cwd=tmp_path, env=env)
        assert found.strip() == "True", f"{module} is importable"
    minimal_project.write(tmp_path)
    printed = _run([python, "-c", minimal_project.SCRIPT], cwd=tmp_path, env=env, timeout=120)
    assert printed.splitlines() == ["check: System check identified no issues (0 silenced).",
                                    "ok"], printed


def test_the_demo_workflows_run_against_the_installed_wheel(installed, tmp_path):
    """The demo project, copied without the source tree (so the wheel's package is the
    one imported), migrates and runs every demo example inline."""
    import shutil

    bin_dir, env = installed
    # The demo's Swagger UI assets: a dev dependency of the checkout, not of the wheel.
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "drf-spectacular-sidecar"],
         cwd=tmp_path, env=env)
    shutil.copytree(ROOT / "demo_project", tmp_path / "demo_project",
                    ignore=shutil.ignore_patterns("db", "__pycache__"))
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    python = str(bin_dir / "python")
    where = _run([python, "-c", "import pikku_workflows; print(pikku_workflows.__file__)"],
                 cwd=tmp_path, env=env)
    assert str(bin_dir.parent) in where, where
    _run([python, "manage.py", "migrate", "-v", "0"], cwd=tmp_path, env=env)
    printed = _run([python, "manage.py", "demo_seed", "--inline"], cwd=tmp_path, env=env)
    statuses = [line.split(": ")[-1] for line in printed.splitlines()
                if line.startswith(("order_saga ", "team_onboarding "))]
    assert statuses == ["completed", "suspended", "failed", "suspended", "completed",
                        "completed"], printed


def test_the_tutorial_runs_against_the_installed_wheel(installed, tmp_path):
    bin_dir, env = installed

    project = tmp_path / "shop"
    project.mkdir()
    redis_url = settings.RQ_QUEUES["default"]["URL"]
    background: list[subprocess.Popen] = []

    def command(words: list[str]) -> list[str]:
        if words[0] in ("python", "python3"):
            return [str(bin_dir / "python"), *words[1:]]
        return [str(bin_dir / words[0]), *words[1:]]

    def check_output(block: Block, printed: str) -> None:
        if block.output is not None:
            assert output_matches(block.output, printed), (
                f"{block.where} prints:\n{printed}\nthe tutorial says:\n{block.output}")

    try:
        for block in parse(ROOT / "docs" / "tutorial.md"):
            if block.kind != "tutorial":
                continue
            target = block.args[0]
            if target == "run":
                printed = "".join(
                    _run(command(shlex.split(line)), cwd=project, env=env)
                    for line in block.code.splitlines() if line.strip())
                check_output(block, printed)
            elif target == "shell":
                printed = _run(command(["python", "manage.py", "shell", "-v", "0"]),
                               cwd=project, env=env, input=block.code)
                check_output(block, printed)
            elif target == "background":
                [line] = [line for line in block.code.splitlines() if line.strip()]
                with (tmp_path / "worker.log").open("w") as log:
                    background.append(subprocess.Popen(
                        command(shlex.split(line)), cwd=project, env=env, stdout=log,
                        stderr=subprocess.STDOUT))
                def worker_started() -> bool:
                    log = (tmp_path / "worker.log").read_text()
                    assert background[-1].poll() is None, log
                    return "pikku_worker " in log

                wait_for(worker_started, timeout=30, interval=0.2)
            else:
                code = block.code
                if TUTORIAL_REDIS in code:
                    # The worker part: the tests' own Redis database, when there is one.
                    if not _redis_available(redis_url):
                        if os.environ.get("PIKKU_REQUIRE_SERVICES") == "1":
                            pytest.fail(f"Redis is not reachable at {redis_url}")
                        break
                    code = code.replace(TUTORIAL_REDIS, redis_url)
                path = project / target
                mode = "a" if block.args[1:] == ["append"] else "w"
                with path.open(mode) as file:
                    file.write(("\n" if mode == "a" else "") + code)

        # The console of step 5: the run page draws the graph; the static files are found.
        page = _run(command(["python", "manage.py", "shell", "-v", "0"]), cwd=project,
                    env=env, input=ADMIN_CHECK)
        assert page.split() == ["200", "True", "200"], page
        assert "console.css" in _run(
            command(["python", "manage.py", "findstatic", "pikku_workflows/console.css"]),
            cwd=project, env=env)
    finally:
        for proc in background:
            proc.terminate()
            proc.wait(timeout=30)
        _redis_available(redis_url)  # flushes what the tutorial's worker left


ADMIN_CHECK = """
from django.contrib.auth.models import User
from django.test import Client
from pikku_workflows.models import WorkflowRun

User.objects.create_superuser("admin", "admin@example.com", "admin")
client = Client()
client.force_login(User.objects.get(username="admin"))
run = WorkflowRun.objects.filter(workflow="place_order").first()
page = client.get(f"/admin/pikku_workflows/workflowrun/{run.pk}/change/", HTTP_HOST="localhost")
print(page.status_code, b"<svg" in page.content)
print(client.get("/admin/pikku_workflows/registeredworkflow/", HTTP_HOST="localhost").status_code)
"""
