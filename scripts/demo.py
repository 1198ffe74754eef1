"""``make demo``: migrate, seed, start a pikku_worker when Redis answers (else the
pikku_scheduler time keeper), serve the demo.

Prints what it started and where to look; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADDRESS = os.environ.get("DEMO_ADDRESS", "127.0.0.1:8000")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def address_free(address: str) -> bool:
    import socket

    host, _, port = address.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver does
        try:
            probe.bind((host or "127.0.0.1", int(port)))
        except OSError:
            return False
    return True


def free_address(busy: str) -> str:
    """The first free address after ``busy`` on the same host, to suggest instead."""
    host, _, port = busy.rpartition(":")
    for candidate in range(int(port) + 1, int(port) + 100):
        if address_free(f"{host}:{candidate}"):
            return f"{host}:{candidate}"
    return f"{host}:8001"


def manage(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env)


def main() -> int:
    # SIGTERM as well as Ctrl-C stops what this script started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if not address_free(ADDRESS):
        print(f"{ADDRESS} is already in use (another demo or server?): stop it, or choose "
              f"another address, e.g. DEMO_ADDRESS={free_address(ADDRESS)} make demo",
              file=sys.stderr)
        return 1
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="demo_project.settings", REDIS_URL=REDIS_URL)
    on_rq = redis_answers(REDIS_URL)
    env["PIKKU_DEMO_EXECUTOR"] = "rq" if on_rq else "inline"
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT,
                   env=env, check=True)
    started: list[tuple[str, subprocess.Popen]] = []
    if on_rq:
        # The worker runs the time keeper too: schedules, delayed starts.
        started.append(("pikku_worker", manage("pikku_worker", env=env)))
    else:
        # No worker without Redis: the time keeper runs alone (the nightly-report schedule).
        started.append(("pikku_scheduler", manage("pikku_scheduler", env=env)))
    seed = subprocess.run([sys.executable, "manage.py", "demo_seed"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if seed.returncode != 0:
        print(seed.stdout, seed.stderr, sep="\n")
        stop(started)
        return seed.returncode
    print(seed.stdout)
    started.append(("web server", manage("runserver", ADDRESS, "--noreload", env=env)))
    # The demo's settings read the executor and Redis from the environment.
    shell = f"PIKKU_DEMO_EXECUTOR=rq REDIS_URL={REDIS_URL} " if on_rq else ""
    executor = (f"rq: a pikku_worker runs the workflows (Redis at {REDIS_URL})" if on_rq
                else f"inline: no Redis answered at {REDIS_URL}; runs execute in the web process")
    print(f"""
pikku_workflows demo
  executor      {executor}
  started       {", ".join(f"{name} (pid {proc.pid})" for name, proc in started)}
  start page    http://{ADDRESS}/            (buttons that start each demo workflow)
  admin console http://{ADDRESS}/admin/      (admin / admin; manager / manager approves big orders)
  schedules     http://{ADDRESS}/admin/pikku_workflows/workflowschedule/
                (nightly-report ticks every minute)
  REST API      http://{ADDRESS}/api/workflows/runs/   docs: http://{ADDRESS}/api/docs/
                (curl -H 'Authorization: Token pikku-demo-admin-token-not-a-secret' ...)
  from a shell  {shell}.venv/bin/python manage.py pikku_start team_onboarding \\
                  '{{"email": "me@example.com", "name": "Me", "team": []}}' --wait
  Ctrl-C stops everything above.
""", flush=True)
    try:
        while all(proc.poll() is None for _, proc in started):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        stop(started)
    return 0


def stop(started: list[tuple[str, subprocess.Popen]]) -> None:
    # A second Ctrl-C (or the SIGINT a terminal also sends to the children) must not
    # interrupt the clean-up and leave a worker or server behind.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for _, proc in started:
        if proc.poll() is None:
            proc.terminate()
    for name, proc in started:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"stopped {name}")


if __name__ == "__main__":
    sys.exit(main())
