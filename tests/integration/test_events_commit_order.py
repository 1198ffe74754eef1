"""PostgreSQL: events commit in id order, so a run's watermark (the highest event id when
it was created) splits events exactly into "stored before" and "stored after" it."""

from __future__ import annotations

import threading
import time

from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain_queues


def blocked_on_an_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                       "AND NOT granted")
        return bool(cursor.fetchone()[0])


def test_a_later_event_cannot_commit_before_an_earlier_one(rq_settings, rq_executor):
    sent, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        try:
            with transaction.atomic():  # the caller's transaction: held open
                pw.send_event("tick", "A", key="k")
                sent.set()
                release.wait(30)
                order.append("A commits")
        finally:
            connection.close()

    def second() -> None:
        try:
            pw.send_event("tick", "B", key="k")
            order.append("B returned")
        finally:
            connection.close()

    a = threading.Thread(target=first)
    a.start()
    assert sent.wait(30)
    b = threading.Thread(target=second)
    b.start()
    deadline = time.monotonic() + 30
    while not blocked_on_an_advisory_lock():
        assert time.monotonic() < deadline, "the second send did not wait for the first"
        time.sleep(0.02)
    # Neither event is committed: a run created now records a watermark below both ids,
    # and B (a higher id) cannot commit before A.
    run = pw.start_workflow("ev_wait_twice", {"key": "k"}, inline=False)
    release.set()
    a.join(30)
    b.join(30)
    assert order == ["A commits", "B returned"]
    drain_queues()
    assert WorkflowRun.objects.get(pk=run.pk).output == ["A", "B"]
