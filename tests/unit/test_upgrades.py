"""An upgrade: runs left in flight by an older schema complete after ``migrate``.

The database is migrated back to the last migration of a previous release, runs are
started there and left sleeping, suspended and mid-retry (on the rq executor, jobs
drained in this process, under a fake clock), then the database is migrated to the
latest migration and every run is driven to its end. Everything it needs is in the tree:
``UPGRADE_FROM`` names the migrations, no git tag.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.runtime.recovery import sweep
from pikku_workflows.testing import drain_queues, fake_clock
from tests.unit.test_migrations import RELEASES

# Migrations commit: the test database must really commit (pytest-django flushes it after).
pytestmark = pytest.mark.django_db(transaction=True)

#: Where an upgrade starts: 0006 is the last migration before 0.1.0 (databases deployed
#: from main before the release), then the last migration of each release. Upgrading from
#: the newest release is a no-op until a migration is added after it.
UPGRADE_FROM = ["0006_fewer_index_writes", *RELEASES.values()]


def applied() -> set[str]:
    """The pikku_workflows migrations the test database has applied."""
    recorder = MigrationExecutor(connection).recorder
    return {name for app, name in recorder.applied_migrations() if app == "pikku_workflows"}


@contextmanager
def code_of_the_schema() -> Iterator[None]:
    """The models without the columns the database does not have yet: the ORM of the
    release that left the runs in flight (a column added since would be in every INSERT
    and SELECT of runs). A hidden field reads as its default, as the code of that release
    knew no other value (never a query for a column the table lacks). Each field is put
    back, in its place, on leaving."""
    hidden = []
    tables = set(connection.introspection.table_names())
    for model in apps.get_app_config("pikku_workflows").get_models():
        if model._meta.proxy or not model._meta.managed or model._meta.db_table not in tables:
            continue
        with connection.cursor() as cursor:
            columns = {c.name for c in connection.introspection.get_table_description(
                cursor, model._meta.db_table)}
        for field in list(model._meta.local_fields):
            if field.column not in columns:
                hidden.append((model, model._meta.local_fields.index(field), field))
                model._meta.local_fields.remove(field)
    descriptors = []
    for model, _, field in hidden:
        _forget_fields(model)
        descriptors.append((model, field.attname, model.__dict__.get(field.attname)))
        setattr(model, field.attname, field.get_default())
    try:
        yield
    finally:
        for model, attname, descriptor in reversed(descriptors):
            if descriptor is None:
                delattr(model, attname)
            else:
                setattr(model, attname, descriptor)
        for model, index, field in reversed(hidden):
            model._meta.local_fields.insert(index, field)
            _forget_fields(model)


def _forget_fields(model) -> None:
    """Drop what a model's options computed from its fields (``_expire_cache`` leaves
    ``db_returning_fields``: the fields with a database default an INSERT returns), and
    the store's template of its unsaved rows (``engine.store.rows``)."""
    from pikku_workflows.engine.store import rows

    model._meta._expire_cache()
    model._meta.__dict__.pop("db_returning_fields", None)
    rows._templates.pop(model, None)


@pytest.fixture
def migrated_back(request):
    """The database at ``request.param``; migrated to the latest again afterwards, also
    when the test fails, so that the tests after it find the current schema."""
    try:
        call_command("migrate", "pikku_workflows", request.param, verbosity=0)
        yield request.param
    finally:
        call_command("migrate", "pikku_workflows", verbosity=0)


@pytest.mark.parametrize("migrated_back", UPGRADE_FROM, indirect=True)
def test_runs_in_flight_complete_after_an_upgrade(migrated_back, rq_executor):
    assert max(applied()) == migrated_back
    with registry.isolated():
        @pw.function(name="upgrade_flaky", retries=3, retry_delay="30s")
        def upgrade_flaky(data, ctx):
            if ctx.attempt == 1:
                raise ConnectionError("flaky")
            return ctx.attempt

        @pw.workflow(name="upgrade_mid_retry")
        def upgrade_mid_retry(wf, data):
            return wf.do("Flaky", "upgrade_flaky", data)

        # A day ahead, so that RQ's scheduler (real time) never delivers a wake-up: the
        # fake clock moving and the recovery sweep do.
        with fake_clock(timezone.now() + timedelta(days=1)) as clock:
            with code_of_the_schema():
                runs = {
                    "sleeping": pw.start_workflow("sleeps_a_week", {}),
                    "suspended": pw.start_workflow("two_gates", {}),
                    "mid_retry": pw.start_workflow("upgrade_mid_retry", {}),
                    "child_suspended": pw.start_workflow("parent",
                                                         {"child": "child_suspends"}),
                    "keyed": pw.start_workflow("naps", {"nap": "1h"}, idempotency_key="k-1"),
                }
                drain_queues()
                statuses = {kind: WorkflowRun.objects.get(pk=run.pk).status
                            for kind, run in runs.items()}
            assert "completed" not in statuses.values() and "failed" not in statuses.values()

            call_command("migrate", "pikku_workflows", verbosity=0)
            executor = MigrationExecutor(connection)
            assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []

            pw.resume_run(runs["suspended"].pk, "warehouse")
            drain_queues()
            pw.resume_run(runs["suspended"].pk, "courier")
            child = WorkflowRun.objects.get(parent_run=runs["child_suspended"].pk)
            pw.resume_run(child.pk, "done")
            drain_queues()
            clock.advance("8d")
            sweep()
            drain_queues()
            # The key still names its run under the new idempotency constraints.
            assert pw.start_workflow("naps", {"nap": "1h"}, idempotency_key="k-1").pk == \
                runs["keyed"].pk

    ended = {kind: WorkflowRun.objects.get(pk=run.pk) for kind, run in runs.items()}
    assert {kind: (run.status, run.error) for kind, run in ended.items()} == {
        kind: ("completed", None) for kind in runs}
    assert ended["sleeping"].output == "after"
    assert ended["suspended"].output == {"warehouse": "warehouse", "courier": "courier"}
    assert ended["mid_retry"].output == 2
    assert ended["child_suspended"].output == {"parent_saw": {"resumed_with": "done"}}
    assert ended["keyed"].output == "after"
