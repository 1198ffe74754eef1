"""Durations, the settings object and the registry of functions and workflows."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.conf import pikku_settings
from pikku_workflows.durations import parse_duration
from pikku_workflows.exceptions import WorkflowConfigurationError
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock


@pytest.mark.parametrize(("text", "seconds"), [
    (5, 5.0), (0.5, 0.5), ("250ms", 0.25), ("5s", 5), ("2sec", 2), ("1second", 1),
    ("3seconds", 3), ("5m", 300), ("5min", 300), ("2minutes", 120), ("1h", 3600),
    ("2hours", 7200), ("3d", 259200), ("1day", 86400), ("2w", 1209600), ("1week", 604800),
    ("12", 12), ("0.25", 0.25), (" 1.5 ", 1.5), ("5200w", 5200 * 604800),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["5 parsecs", "soon", "-1s", -1, "1.5h", None, True, "", [1],
                                 ".5", "1e3", "nan", float("nan"), float("inf")])
def test_bad_durations_say_what_is_wrong(bad):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


@pytest.mark.parametrize("too_long", ["5300w", "1000000d", 1e10])
def test_durations_beyond_the_calendar_are_refused(too_long):
    with pytest.raises(ValueError, match="the longest duration is 100 years"):
        parse_duration(too_long)


@pytest.mark.django_db
def test_a_fractional_retry_delay_is_stored_in_a_form_that_parses_again():
    """retry_delay=0.25 was stored as '0.25', which the first retry then failed to parse."""
    with registry.isolated():
        @pw.workflow(name="fractional_delay")
        def fractional_delay(wf, data):
            return wf.do("Flaky", "flaky", {"fail_times": 1}, retries=2, retry_delay=0.25)

        with fake_clock():
            run = pw.start_workflow("fractional_delay", {})
    run.refresh_from_db()
    assert run.status == "completed", run.error
    step = run.steps.get(step_name="Flaky")
    assert (step.retry_delay, step.attempt_count) == ("0.25", 2)


@pytest.mark.django_db
def test_a_sleep_beyond_the_calendar_is_a_definition_error():
    with registry.isolated():
        @pw.workflow(name="sleeps_forever")
        def sleeps_forever(wf, data):
            wf.sleep("Forever", "99999999w")

        run = pw.start_workflow("sleeps_forever", {})
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["code"] == "DEFINITION_ERROR"
    assert "the longest duration is 100 years" in run.error["message"]


def test_settings_defaults_and_override():
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.DEFAULT_RETRIES == 5
        assert pikku_settings.MAX_RETRY_DELAY == 60
        assert pikku_settings.ORCHESTRATOR_QUEUE == "pikku-workflow-orchestrator"
        assert pikku_settings.EXECUTOR == "inline"
    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_RETRIES": 2, "LEASE_TIMEOUT": "1min"}):
        assert pikku_settings.DEFAULT_RETRIES == 2
        assert pikku_settings.LEASE_TIMEOUT == 60
    assert pikku_settings.DEFAULT_RETRIES == 5


def test_unknown_setting_keys_raise():
    with override_settings(PIKKU_WORKFLOWS={"EXECUTER": "rq"}), \
            pytest.raises(WorkflowConfigurationError, match="EXECUTER"):
        _ = pikku_settings.EXECUTOR
    with pytest.raises(AttributeError):
        _ = pikku_settings.NOT_A_SETTING


@pytest.mark.parametrize("bad", [
    {"EXECUTOR": "celery"}, {"DEFAULT_RETRIES": -1}, {"STALLED_AFTER": "whenever"},
    {"PREPARED_STATEMENTS": "yes"}, {"EAGER_QUEUED_STEPS": 1},
])
def test_invalid_setting_values_raise(bad):
    key = next(iter(bad))
    with override_settings(PIKKU_WORKFLOWS=bad), \
            pytest.raises(WorkflowConfigurationError, match=key):
        getattr(pikku_settings, key)


def test_decorators_with_and_without_arguments_return_the_function():
    with registry.isolated():
        @pw.function
        def plain(data):
            return data + 1

        @pw.function(name="renamed", retries=2, retry_delay="1s", atomic=True)
        def configured(data, ctx):
            return data

        @pw.workflow
        def my_flow(wf, data):
            """Does a thing."""
            return data

        assert plain(1) == 2  # still directly callable
        assert plain.__pikku_name__ == "plain"
        definition = registry.function("renamed")
        assert definition.fn is configured and definition.retries == 2
        assert definition.takes_context and definition.atomic
        assert not registry.function("plain").takes_context
        assert registry.workflow("my_flow").description == "Does a thing."
    assert registry.function("plain") is None


def test_two_things_under_one_name_is_an_error_naming_both():
    with registry.isolated():
        @pw.function(name="shared_name")
        def first(data):
            return data

        with pytest.raises(pw.WorkflowDefinitionError) as info:
            @pw.workflow(name="shared_name")
            def second(wf, data):
                return data
        message = str(info.value)
        assert "first" in message and "second" in message and "shared_name" in message


@pytest.mark.parametrize("options", [
    {"retries": -1}, {"retries": "3"}, {"retry_delay": "often"}, {"timeout": "forever"},
])
def test_invalid_function_options_fail_at_declaration(options):
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError):
        pw.function(lambda data: data, name="bad_options", **options)


def test_workflows_modules_are_autodiscovered():
    # tests.testapp.workflows, autodiscovered, imports the modules that declare them.
    assert registry.workflow("sequential").fn.__module__ == "tests.testapp.shared"
    assert registry.workflow("with_state").fn.__module__ == "tests.unit.workflows_engine"
    assert registry.function("double").name == "double"


def test_unknown_workflow_lookup():
    with pytest.raises(pw.WorkflowNotFoundError, match="'nope'"):
        registry.workflow("nope")


@pytest.mark.parametrize(("name", "message"), [
    ("  ", "must be a non-empty string"), ("w" * 201, "at most 200 characters")])
def test_names_that_do_not_fit_their_column_are_refused_at_registration(name, message):
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError, match=message):
        pw.workflow(name=name)(lambda wf, data: None)
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError, match=message):
        pw.function(name=name)(lambda data: None)
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError, match=message):
        pw.graph_workflow(name, {"a": "echo"})


def test_every_exported_error_is_documented_with_its_code():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    errors = [getattr(pw, name) for name in pw.__all__ if name.endswith("Error")]
    assert len(errors) == 19
    for error in errors:
        assert f"| `{error.__name__}` |" in page and f"| `{error.code}` |" in page


def test_an_old_sqlite_is_reported_by_the_system_checks(monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError
    from django.db import connection

    from pikku_workflows import checks

    assert checks.check_sqlite_version() == []
    monkeypatch.setattr(checks.sqlite3, "sqlite_version_info", (3, 34, 1))
    errors = checks.check_sqlite_version()
    if connection.vendor != "sqlite":
        assert errors == []  # the runs' database is not SQLite
        return
    assert [e.id for e in errors] == ["pikku_workflows.E001"]
    assert "SQLite 3.34.1" in errors[0].msg and "3.35.0" in errors[0].msg
    with pytest.raises(SystemCheckError, match="E001"):
        call_command("check")
