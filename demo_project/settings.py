"""Settings of the demo project: SQLite in demo_project/db/, the inline executor."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "demo_project.urls"
WSGI_APPLICATION = "demo_project.wsgi.application"
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
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pikku_workflows",
    "demo_project.shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# PIKKU_DEMO_DB: another file (`make screenshots` seeds a demo of its own there).
DEMO_DB = Path(os.environ.get("PIKKU_DEMO_DB") or BASE_DIR / "db" / "demo.sqlite3")
DEMO_DB.parent.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DEMO_DB,
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20},
    }
}

RQ_QUEUES = {"default": {"URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")}}

REST_FRAMEWORK = {
    # Services send "Authorization: Token <key>" (one indexed lookup, no password hash);
    # first in the list, so an unauthenticated call gets 401 with WWW-Authenticate.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "pikku_workflows demo API",
    "DESCRIPTION": "Run status and control of the demo shop's workflows.",
    "VERSION": "1",
    # Swagger UI's JavaScript and CSS from the drf-spectacular-sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

PIKKU_WORKFLOWS = {
    # `make demo` says "rq" when Redis answers (and starts a pikku_worker), else "inline".
    "EXECUTOR": os.environ.get("PIKKU_DEMO_EXECUTOR", "inline"),
    "DEFAULT_RETRIES": 3,
    "DEFAULT_RETRY_DELAY": "200ms",
    # Named step limits (docs/step-limits.md): send_welcome holds "email".
    "LIMITS": {"email": {"rate": "10/s"}},
}
