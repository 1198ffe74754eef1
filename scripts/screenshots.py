"""``make screenshots``: the console screenshots of the README and docs/console.md,
taken from the demo.

Seeds a demo of its own (a fresh SQLite file, inline executor: no worker or Redis
needed), serves it, and photographs the runs list and the run page of an order that
waits for a manager's approval with Debian's Chromium (Playwright, never a downloaded
browser). Writes ``docs/img/runs-list.png`` and ``docs/img/run-page.png``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WIDTH, HEIGHT = 1280, 900


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          check=True, capture_output=True, text=True).stdout


def waiting_order(env: dict[str, str]) -> str:
    """The id of the demo's order run that waits for an approval (else its first order)."""
    code = ("import django; django.setup()\n"
            "from pikku_workflows.models import WorkflowRun\n"
            "runs = WorkflowRun.objects.filter(workflow='order_saga').order_by('created_at')\n"
            "run = runs.filter(status='suspended', error__code='WAITING_FOR_APPROVAL')"
            ".first() or runs.first()\n"
            "print(run.pk)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def photograph(url: str, run_id: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}/admin/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin")
        page.click("input[type=submit]")
        page.goto(f"{url}/admin/pikku_workflows/workflowrun/")
        page.screenshot(path=str(IMAGES / "runs-list.png"))
        page.goto(f"{url}/admin/pikku_workflows/workflowrun/{run_id}/change/")
        page.wait_for_selector("svg")
        page.screenshot(path=str(IMAGES / "run-page.png"), full_page=True)
        browser.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="demo_project.settings",
                   PIKKU_DEMO_EXECUTOR="inline",
                   PIKKU_DEMO_DB=str(Path(scratch) / "demo.sqlite3"))
        manage(env, "migrate", "--noinput", "-v0")
        manage(env, "demo_seed")
        run_id = waiting_order(env)
        port = free_port()
        server = subprocess.Popen([sys.executable, "manage.py", "runserver",
                                   f"127.0.0.1:{port}", "--noreload"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        print("the demo server did not start", file=sys.stderr)
                        return 1
                    time.sleep(0.2)
            IMAGES.mkdir(parents=True, exist_ok=True)
            photograph(f"http://127.0.0.1:{port}", run_id)
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"wrote {IMAGES / 'runs-list.png'} and {IMAGES / 'run-page.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
