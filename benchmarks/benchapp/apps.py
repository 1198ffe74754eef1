"""The benchmark app's configuration."""

from __future__ import annotations

from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchmarks.benchapp"
    label = "pikku_benchapp"
    verbose_name = "pikku_workflows benchmarks"
