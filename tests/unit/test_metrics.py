"""Optional Prometheus metrics: signal receivers, the live-runs gauge, the /metrics view."""

from __future__ import annotations

import sys

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory, override_settings
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import pikku_workflows as pw
from pikku_workflows import metrics
from pikku_workflows.conf import pikku_settings
from pikku_workflows.exceptions import WorkflowConfigurationError
from pikku_workflows.testing import fake_clock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def metrics_on():
    metrics.install()
    yield
    metrics.uninstall()


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Sample values now, to compare with after the code under test ran."""

    def __init__(self, *samples: tuple) -> None:
        self.samples = samples
        self.before = [value(name, **labels) for name, labels in samples]

    def __call__(self) -> list[float]:
        return [value(name, **labels) - before
                for (name, labels), before in zip(self.samples, self.before, strict=True)]


def test_runs_and_steps_are_counted(metrics_on):
    delta = Delta(
        ("pikku_workflow_runs_total", {"workflow": "sequential", "status": "started"}),
        ("pikku_workflow_runs_total", {"workflow": "sequential", "status": "completed"}),
        ("pikku_workflow_runs_total", {"workflow": "sequential", "status": "failed"}),
        ("pikku_workflow_step_duration_seconds_count",
         {"function": "add", "outcome": "succeeded"}),
        ("pikku_workflow_step_duration_seconds_count",
         {"function": "double", "outcome": "succeeded"}),
    )
    for x in (1, 2, 3):
        pw.start_workflow("sequential", {"x": x}, inline=True)
    assert delta() == [3, 3, 0, 3, 3]


def test_retries_failures_and_their_durations_with_the_fake_clock(metrics_on):
    delta = Delta(
        ("pikku_workflow_step_retries_total", {"function": "flaky"}),
        ("pikku_workflow_step_duration_seconds_count",
         {"function": "flaky", "outcome": "retried"}),
        ("pikku_workflow_step_duration_seconds_count",
         {"function": "flaky", "outcome": "succeeded"}),
        ("pikku_workflow_step_failures_total", {"function": "always_fails"}),
        ("pikku_workflow_step_retries_total", {"function": "always_fails"}),
        ("pikku_workflow_runs_total", {"workflow": "compensated", "status": "failed"}),
    )
    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_RETRY_DELAY": "5s"}), fake_clock():
        pw.start_workflow("retrying", {"fail_times": 2, "retries": 3}, inline=True)
        pw.start_workflow("compensated", {"order": 1, "retries": 1}, inline=True)
    assert delta() == [2, 2, 1, 1, 1, 1]


def test_a_closure_step_is_labelled_inline(metrics_on):
    delta = Delta(("pikku_workflow_step_duration_seconds_count",
                   {"function": "inline", "outcome": "succeeded"}))
    run = pw.start_workflow("closures", {"order": 1}, inline=True)
    assert run.status == "completed"
    assert delta() == [1]


def _scrape(client, **headers) -> dict:
    response = client.get("/metrics/", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_the_view_serves_counters_and_the_live_gauge_to_staff(client, metrics_on):
    pw.start_workflow("sequential", {"x": 1}, inline=True)
    for _ in range(2):
        pw.start_workflow("two_gates", {}, inline=True)  # suspended
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    samples = _scrape(client)
    assert samples[("pikku_workflow_runs",
                    (("status", "suspended"), ("workflow", "two_gates")))] == 2
    assert ("pikku_workflow_runs", (("status", "running"), ("workflow", "two_gates"))) \
        not in samples
    completed = ("pikku_workflow_runs_total",
                 (("status", "completed"), ("workflow", "sequential")))
    assert samples[completed] >= 1


def test_the_view_refuses_everyone_else(client):
    assert client.get("/metrics/").status_code == 403
    User.objects.create_user("ada", password="pw")
    client.login(username="ada", password="pw")
    assert client.get("/metrics/").status_code == 403
    # A bearer token means nothing while no METRICS_TOKEN is set.
    assert client.get("/metrics/", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_the_view_admits_the_metrics_token(client):
    with override_settings(PIKKU_WORKFLOWS={"METRICS_TOKEN": "s3cret-scrape"}):
        _scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape")
        for wrong in ("Bearer s3cret", "Bearer s3cret-scrape2", "s3cret-scrape",
                      "Basic s3cret-scrape"):
            assert client.get("/metrics/", HTTP_AUTHORIZATION=wrong).status_code == 403


def test_without_prometheus_client_it_is_improperly_configured(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    request = RequestFactory().get("/metrics/")
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'pikku-workflows\[metrics\]'"):
        metrics.metrics_view(request)
    created = dict(metrics._metrics)
    metrics._metrics.clear()  # as in a fresh process
    try:
        with pytest.raises(ImproperlyConfigured, match="needs prometheus-client"):
            metrics.install()
    finally:
        metrics._metrics.update(created)
    assert not metrics.installed()


def test_the_metrics_setting_installs_the_receivers_at_startup():
    config = apps.get_app_config("pikku_workflows")
    config.ready()
    assert not metrics.installed()  # off by default: the engine pays nothing
    with override_settings(PIKKU_WORKFLOWS={"METRICS": True}):
        config.ready()
        try:
            assert metrics.installed()
            assert pw.run_completed.has_listeners()
        finally:
            metrics.uninstall()
    assert not metrics.installed()


@pytest.mark.parametrize(("key", "bad"), [("METRICS", "yes"), ("METRICS_TOKEN", ""),
                                          ("METRICS_TOKEN", 42)])
def test_metrics_settings_are_validated(key, bad):
    with override_settings(PIKKU_WORKFLOWS={key: bad}), \
            pytest.raises(WorkflowConfigurationError, match=key):
        getattr(pikku_settings, key)
