"""Redis stopped mid-load and restarted empty: the database alone brings every run home."""

from __future__ import annotations

import shutil
import subprocess
import time
from urllib.parse import urlparse

import pytest
from django.conf import settings
from django.test import override_settings

from tests.services import SETTINGS, Workers, wait_for

from .chaos import check_orders, describe_unfinished, start_orders, unfinished

pytestmark = pytest.mark.django_db(transaction=True)


class PrivateRedis:
    """A Redis server of this test's own (RQ_QUEUES['faults']), without persistence."""

    def __init__(self) -> None:
        self.port = urlparse(settings.RQ_QUEUES["faults"]["URL"]).port
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL)
        wait_for(self.answers, timeout=10, interval=0.05)

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()  # no save: it comes back empty
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def private_redis():
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed")
    server = PrivateRedis()
    server.start()
    yield server
    server.stop()


def test_redis_lost_mid_load_and_restarted_empty_loses_no_run(private_redis, db):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("fault tests run on PostgreSQL")
    worker_settings = {**SETTINGS, "RQ_CONNECTION": "faults"}
    pool = Workers(worker_settings)
    with override_settings(PIKKU_WORKFLOWS=worker_settings):
        try:
            pool.start(2)
            started = start_orders(60)
            time.sleep(1.5)  # mid-load: steps running, sleeps scheduled, jobs queued
            assert unfinished(list(started))
            private_redis.stop()
            time.sleep(3)  # the workers and the scheduler meet a dead Redis
            private_redis.start()
            try:
                wait_for(lambda: unfinished(list(started)) == 0, timeout=90, interval=0.5)
            except AssertionError:
                raise AssertionError(describe_unfinished(list(started))
                                     + pool.output()[-3000:]) from None
            assert check_orders(started) == []
            assert all(proc.poll() is None for proc in pool.procs), pool.output()[-3000:]
        finally:
            pool.close()
