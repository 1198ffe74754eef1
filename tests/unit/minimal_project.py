"""A Django project with pikku_workflows and no REST API: what a project that installs the
package without its ``rest`` extra has (Django, rq, django-rq, redis and nothing else).

``write(directory)`` lays it out (SQLite, the inline executor, the admin; ``api=True``
mounts the REST API's URLs too); ``SCRIPT``, run in it with ``python -c``, migrates, runs
``manage.py check``, runs a workflow to completion, reads it back with ``get_run_status``
and ``pikku_start --wait``, loads the admin's run page and its downloaded history, and
prints ``ok``. ``BLOCK_REST`` (prepended) makes the REST framework unimportable in a
venv that has it. Used by ``test_rest_optional.py`` (the checkout's venv, the REST
framework blocked) and ``test_packaging.py`` (the wheel installed without extras).
"""

from __future__ import annotations

from pathlib import Path

SETTINGS = '''
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "minimal-project-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_rq",
    "pikku_workflows",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": BASE_DIR / "db.sqlite3",
                         "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"}}}
RQ_QUEUES = {"default": {"URL": "redis://127.0.0.1:6379/0"}}
PIKKU_WORKFLOWS = {"EXECUTOR": "inline"}
'''

URLS = '''
from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls)]
'''

API_URLS = '''
urlpatterns.append(path("api/workflows/", include("pikku_workflows.api.urls")))
'''

WORKFLOWS = '''
import pikku_workflows as pw


@pw.function
def reserve(data):
    return {"reserved": data["items"]}


@pw.function(retries=2, retry_delay=0)
def charge(data, ctx):
    if ctx.attempt < 2:
        raise RuntimeError("card network busy")
    return {"charged": data["amount"]}


@pw.workflow
def place_order(wf, data):
    stock = wf.do("Reserve stock", reserve, {"items": data["items"]})
    payment = wf.do("Charge", charge, {"amount": data["amount"]})
    note = wf.do("Note", lambda: "thanks")
    return {**stock, **payment, "note": note}
'''

#: Makes the REST framework's packages unimportable, whether installed or not.
BLOCK_REST = '''
import sys


class BlockRest:
    """Refuses the REST framework's packages, as a venv without the `rest` extra would."""

    blocked = ("rest_framework", "django_filters", "drf_spectacular", "rich")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, BlockRest())
'''

SCRIPT = '''
import io
import json
import os
import sys

os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
sys.path.insert(0, os.getcwd())

import django

django.setup()

from django.core.management import call_command

call_command("migrate", verbosity=0)
checked = io.StringIO()
call_command("check", stdout=checked, stderr=checked)
print("check:", checked.getvalue().strip())

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

output = pw.run_to_completion("place_order", {"items": ["book"], "amount": 12})
assert output == {"reserved": ["book"], "charged": 12, "note": "thanks"}, output
run = WorkflowRun.objects.get()
detail = pw.get_run_status(run.pk)
assert detail["status"] == "completed" and detail["output"] == output, detail
assert [(s["name"], s["kind"], s["attempts"]) for s in detail["steps"]] == [
    ("Reserve stock", "step", 1), ("Charge", "step", 2), ("Note", "closure", 1)], detail
json.dumps(detail)

printed = io.StringIO()
call_command("pikku_start", "place_order", '{"items": [], "amount": 3}', "--wait",
             stdout=printed)
assert "place_order completed" in printed.getvalue(), printed.getvalue()
printed = io.StringIO()
call_command("pikku_versions", stdout=printed)
call_command("pikku_graph", "place_order", stdout=printed)
call_command("pikku_prune", "--older-than", "30d", "--dry-run", stdout=printed)

from django.contrib.auth.models import User
from django.test import Client

User.objects.create_superuser("admin", "admin@example.com", "admin")
client = Client()
client.force_login(User.objects.get(username="admin"))
page = client.get(f"/admin/pikku_workflows/workflowrun/{run.pk}/change/",
                  HTTP_HOST="localhost")
assert page.status_code == 200 and b"<svg" in page.content, page.status_code
listed = client.get("/admin/pikku_workflows/workflowrun/", HTTP_HOST="localhost")
assert listed.status_code == 200, listed.status_code
workflows = client.get("/admin/pikku_workflows/registeredworkflow/", HTTP_HOST="localhost")
assert workflows.status_code == 200, workflows.status_code
history = client.get(f"/admin/pikku_workflows/workflowrun/{run.pk}/history.json",
                     HTTP_HOST="localhost")
assert history.status_code == 200, history.status_code
assert json.loads(b"".join(history.streaming_content))["run"] == detail

loaded = sorted(name for name in sys.modules
                if name.split(".")[0] in ("rest_framework", "django_filters",
                                          "drf_spectacular", "rich"))
assert not loaded, loaded
print("ok")
'''


def write(directory: Path, *, api: bool = False) -> None:
    """Lay out the project in ``directory``.

    Args:
        directory: An empty directory.
        api: Mount the REST API's URLs too (``INSTALLED_APPS`` still without the REST
            framework's apps).
    """
    (directory / "shop").mkdir()
    (directory / "shop" / "__init__.py").write_text("")
    (directory / "shop" / "workflows.py").write_text(WORKFLOWS)
    (directory / "settings.py").write_text(SETTINGS)
    (directory / "urls.py").write_text(URLS + (API_URLS if api else ""))
