"""Settings of the API and console benchmarks: the engine's, plus the admin and the API."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import INSTALLED_APPS, POSTGRES_URL

INSTALLED_APPS = [
    "django.contrib.admin", *INSTALLED_APPS[:2], "django.contrib.sessions",
    "django.contrib.messages", "django.contrib.staticfiles", *INSTALLED_APPS[2:4],
    "django_filters", *INSTALLED_APPS[4:],
]
ROOT_URLCONF = "benchmarks.surface_urls"
STATIC_URL = "static/"
ALLOWED_HOSTS = ["testserver"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages"]},
}]
REST_FRAMEWORK = {"DEFAULT_AUTHENTICATION_CLASSES": [
    "rest_framework.authentication.SessionAuthentication"]}
# One PostgreSQL database per size, named by PIKKU_SURFACE_DB (the 1M one is kept).
_server = urlparse(POSTGRES_URL)
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": os.environ.get("PIKKU_SURFACE_DB", "pikku_bench_surfaces_1k"),
    "USER": _server.username or "root", "PASSWORD": _server.password or "",
    "HOST": _server.hostname or "127.0.0.1", "PORT": str(_server.port or 5432),
    "CONN_MAX_AGE": 600,
}}
