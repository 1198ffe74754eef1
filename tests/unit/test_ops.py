"""Operations: run_inline() with queued steps, pikku_worker's logging, the settings
check, and the audit of refused approval answers."""

from __future__ import annotations

import logging
import logging.config

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.testing import run_inline
from tests.testapp.models import Ledger

#: The rq executor on a Redis nobody answers on: anything sent there fails.
UNREACHABLE_RQ = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable", "DEFAULT_RETRY_DELAY": 0}


# --- run_inline() runs queued steps in the test's process --------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workflow, data, output", [
    ("one_queued", "x", "x"),
    ("ten_steps", None, 45),
    ("parent", {"child": "one_queued", "child_input": "y"}, {"parent_saw": "y"}),
])
def test_run_inline_runs_queued_steps_without_redis(workflow, data, output):
    with override_settings(PIKKU_WORKFLOWS=UNREACHABLE_RQ), run_inline():
        run = pw.start_workflow(workflow, data)
        status = pw.get_run_status(run.id)
    assert status["status"] == "completed", status
    assert status["output"] == output
    assert Ledger.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_inline_runs_queued_steps_when_the_executor_is_inline():
    with run_inline():
        assert pw.run_to_completion("one_queued", "z") == "z"


@pytest.mark.django_db(transaction=True)
def test_outside_run_inline_an_inline_run_still_refuses_queued_steps():
    run = pw.start_workflow("one_queued", "x")
    assert pw.get_run_status(run.id)["status"] == "failed"


@pw.workflow
def ops_queued_fan_out(wf, data):
    return wf.parallel([(f"Q{i}", "q_record", i) for i in range(3)])


@pytest.mark.django_db(transaction=True)
def test_run_inline_runs_a_fan_out_of_queued_steps_without_redis():
    with override_settings(PIKKU_WORKFLOWS=UNREACHABLE_RQ), run_inline():
        assert pw.run_to_completion("ops_queued_fan_out") == [0, 1, 2]
    assert Ledger.objects.count() == 3


# --- every refused approval answer is audited ------------------------------------------

AUDIT = {"AUDIT": "tests.testapp.shared.collect_audit", "DEFAULT_RETRY_DELAY": 0}


def _audited():
    from tests.testapp.shared import AUDIT_LOG

    return [(a["outcome"], a["reason"], a["user_id"], bool(a["refusal"])) for a in AUDIT_LOG]


@pytest.mark.django_db
def test_an_answer_to_an_expired_gate_is_audited(users):
    from pikku_workflows.testing import fake_clock

    with override_settings(PIKKU_WORKFLOWS=AUDIT), fake_clock() as clock:
        run = pw.start_workflow("needs_approval", {"expiry": "1h"})
        clock.sleep(7200)   # the deadline passes; nobody has woken the run yet
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="expired"):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("expired", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_a_finished_run_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {})
        pw.cancel_run(run.pk)
        with pytest.raises(pw.WorkflowRunStateError):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("run_finished", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_an_unknown_gate_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {})
        with pytest.raises(pw.WorkflowError, match="no approval gate"):
            pw.approve_step(run.pk, "Nobody's gate", {"ok": 1}, user=users["other"])
    assert _audited() == [("unknown_gate", "Nobody's gate", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_a_settled_gate_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("prefixed_gates", {})
        pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["owner"])
        assert pw.get_run_status(run.pk)["status"] == "suspended"   # at the second gate
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="already"):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 2}, user=users["other"])
    assert _audited() == [("success", "Manager sign-off", users["owner"].pk, False),
                          ("already_settled", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_a_forbidden_answer_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {"approvers": "owner"}, owner=users["owner"])
        with pytest.raises(pw.WorkflowApprovalForbiddenError):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("denied", "Manager sign-off", users["other"].pk, True)]


# --- manage.py check validates PIKKU_WORKFLOWS ------------------------------------------


def _pikku_checks(pikku_workflows, **other):
    from django.core import checks

    from tests.settings import TEST_LIMITS

    # The limits the test suite's functions name (else E015 for each).
    if isinstance(pikku_workflows, dict) and "LIMITS" not in pikku_workflows:
        pikku_workflows = {**pikku_workflows, "LIMITS": TEST_LIMITS}
    with override_settings(PIKKU_WORKFLOWS=pikku_workflows, **other):
        return [(m.id, m.msg, m.hint or "") for m in checks.run_checks()
                if (m.id or "").startswith("pikku_workflows.")]


def test_check_passes_good_settings():
    assert _pikku_checks({"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable",
                          "LEASE_TIMEOUT": "10s", "AUDIT": "tests.testapp.shared.collect_audit",
                          "DEFAULT_RETRIES": 0}) == []
    assert _pikku_checks({}) == []


def test_check_finds_an_unknown_setting_with_a_suggestion():
    found = _pikku_checks({"EXECUTER": "rq"})
    assert [(i, "'EXECUTER'" in m, h) for i, m, h in found] == [
        ("pikku_workflows.E010", True, "Did you mean 'EXECUTOR'?")]
    (_, _, hint), = _pikku_checks({"ZZZ": 1})
    assert "EXECUTOR" in hint and "MAX_INPUT_BYTES" in hint   # no near match: the known ones


@pytest.mark.parametrize("key, value, says", [
    ("EXECUTOR", "celery", "EXECUTOR"),
    ("LEASE_TIMEOUT", "soon", "LEASE_TIMEOUT"),
    ("DEFAULT_RETRIES", -1, "DEFAULT_RETRIES"),
    ("EAGER_QUEUED_STEPS", "yes", "EAGER_QUEUED_STEPS"),
    ("MAX_STREAMS_PER_USER", 0, "MAX_STREAMS_PER_USER"),
    ("METRICS_TOKEN", "", "METRICS_TOKEN"),
    ("AUDIT", "tests.no_such_module.sink", "AUDIT"),
    ("API_PERMISSION_CLASSES", ["rest_framework.permissions.NoSuchClass"],
     "API_PERMISSION_CLASSES"),
])
def test_check_finds_a_bad_value(key, value, says):
    found = _pikku_checks({key: value})
    assert [i for i, _, _ in found] == ["pikku_workflows.E011"], found
    assert says in found[0][1]


def test_check_finds_an_rq_connection_missing_from_rq_queues():
    found = _pikku_checks({"EXECUTOR": "rq", "RQ_CONNECTION": "nope"})
    assert [i for i, _, _ in found] == ["pikku_workflows.E012"]
    assert "'nope'" in found[0][1] and "RQ_QUEUES" in found[0][1]
    assert "default" in found[0][2]   # the hint names the aliases there are
    # The default alias, with no RQ_QUEUES at all.
    found = _pikku_checks({"EXECUTOR": "rq"}, RQ_QUEUES={})
    assert [i for i, _, _ in found] == ["pikku_workflows.E012"]
    # Only the rq executor needs it.
    assert _pikku_checks({"RQ_CONNECTION": "nope"}) == []


def test_check_finds_settings_that_are_not_a_dict():
    assert [i for i, _, _ in _pikku_checks(["EXECUTOR"])] == ["pikku_workflows.E013"]


def test_manage_py_check_fails_on_a_typo():
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with override_settings(PIKKU_WORKFLOWS={"EXECUTER": "rq"}), \
            pytest.raises(SystemCheckError, match="EXECUTER"):
        call_command("check")


# --- pikku_worker leaves the project's logging alone -----------------------------------


class ListHandler(logging.Handler):
    """Keeps the messages it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def project_logging():
    """Applies a LOGGING dict as Django does at setup (dictConfig); restores the test
    project's logging afterwards."""
    from django.conf import settings

    def reset() -> None:
        # As in a fresh process: neither the root nor pikku_workflows configured.
        for name in ("", "pikku_workflows"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET if name else logging.WARNING)

    def apply(config: dict) -> None:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False,
                                   **config})

    reset()
    yield apply
    reset()
    logging.config.dictConfig(settings.LOGGING)


def _log_lines(handler, capfd):
    from pikku_workflows.management.commands.pikku_worker import _log_to_console

    _log_to_console(1)   # what pikku_worker does at start (default verbosity)
    capfd.readouterr()
    logging.getLogger("pikku_workflows.worker").info("an info line")
    logging.getLogger("pikku_workflows.worker").warning("a warning line")
    return handler.lines, capfd.readouterr().err


def test_pikku_worker_keeps_the_level_logging_sets(project_logging, capfd):
    handler = ListHandler()
    project_logging({"loggers": {"pikku_workflows": {"level": "WARNING"}}})
    logging.getLogger("pikku_workflows").addHandler(handler)
    lines, err = _log_lines(handler, capfd)
    assert lines == ["a warning line"]
    assert err == ""


def test_pikku_worker_logs_once_through_a_root_handler(project_logging, capfd):
    handler = ListHandler()
    project_logging({"root": {"level": "INFO"}})
    logging.getLogger().addHandler(handler)
    lines, err = _log_lines(handler, capfd)
    # One line per state change, through the project's handler only (not twice).
    assert lines == ["an info line", "a warning line"]
    assert err == ""


def test_pikku_worker_logs_to_stderr_when_nothing_is_configured(project_logging, capfd):
    root = logging.getLogger()
    for handler in list(root.handlers):   # pytest's own capture handlers
        root.removeHandler(handler)
    _, err = _log_lines(ListHandler(), capfd)
    assert "an info line" in err and "a warning line" in err
    assert err.count("a warning line") == 1


# --- the supervisor sample stops a worker's scheduler child with it --------------------


def test_the_supervisor_sample_signals_the_whole_process_group():
    import configparser

    from tests.unit.docs_blocks import ROOT, parse

    samples = [b for b in parse(ROOT / "docs" / "deploying.md")
               if b.lang == "ini" and "[program:" in b.code]
    assert samples
    for block in samples:
        config = configparser.ConfigParser(interpolation=None, strict=True)
        config.read_string(block.code)
        for section in config.sections():
            assert config[section].getboolean("stopasgroup"), block.where
            assert config[section].getboolean("killasgroup"), block.where


class _RunsElsewhere:
    """A router that sends this app's rows to another database."""

    def db_for_read(self, model, **hints):
        return "pikku_mirror" if model._meta.app_label == "pikku_workflows" else None

    db_for_write = db_for_read


def test_check_refuses_a_router_sending_the_runs_elsewhere(settings):
    from pikku_workflows.checks import check_database_routing

    assert check_database_routing() == []
    settings.DATABASE_ROUTERS = [_RunsElsewhere()]  # Django's test signal resets the cache
    found = check_database_routing()
    assert {e.id for e in found} == {"pikku_workflows.E014"}
    assert any("writes of pikku_workflows.WorkflowRun to 'pikku_mirror'" in e.msg
               for e in found)
