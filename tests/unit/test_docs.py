"""Every code sample of the documentation runs, and prints what the page says it prints.

The Python blocks of README.md and docs/*.md run here against the test project (SQLite
and PostgreSQL), in an empty registry (a fresh project's), with the default settings,
inline, under the fake clock (so a sample's ``wf.sleep("3d")`` takes no time). How a
block is run is said by a directive before it: see ``tests/unit/docs_blocks.py``.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import io
import linecache
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command, get_commands, load_command_class
from django.test import override_settings
from django.urls import include, path

from pikku_workflows.checks import sqlite_wal_warnings
from pikku_workflows.conf import DEFAULTS, pikku_settings
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock
from tests.unit.docs_blocks import ROOT, Block, all_blocks, output_matches

BLOCKS = all_blocks()
RUNNABLE = {None, "scenario"}


def _scenarios() -> dict[str, list[Block]]:
    groups: dict[str, list[Block]] = defaultdict(list)
    for block in BLOCKS:
        if block.kind not in RUNNABLE or not (
                block.lang == "python" or (block.lang == "sh" and block.kind == "scenario")):
            continue
        if block.kind == "scenario":
            key = f"{block.path.relative_to(ROOT)}:{block.args[0]}"
        else:
            key = block.where
        groups[key].append(block)
    return dict(groups)


SCENARIOS = _scenarios()


def _compile(code: str, block: Block, line: int, what: str):
    # Registered in linecache so that inspect.getsource() (the DSL analysis) reads it.
    filename = f"<{block.where} {what}>"
    padded = "\n" * (line - 1) + code
    linecache.cache[filename] = (len(padded), None, padded.splitlines(True), filename)
    return compile(padded, filename, "exec")


def _run_commands(block: Block) -> str:
    """``python manage.py NAME ARGS`` lines of a shell block, through call_command."""
    out = io.StringIO()
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[:2] == ["python", "manage.py"], f"{block.where}: cannot run {line!r}"
        call_command(*words[2:], stdout=out)
    return out.getvalue()


def _run_code(code: str, block: Block, line: int, what: str, namespace: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_compile(code, block, line, what), namespace)
    return out.getvalue()


@pytest.fixture
def fresh_project(db):
    """An empty registry and the default settings: what a new project has."""
    with registry.isolated():
        registry._entries = {}
        with override_settings(PIKKU_WORKFLOWS={}), fake_clock():
            yield


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sample(scenario, fresh_project):
    blocks = SCENARIOS[scenario]
    namespace: dict = {"__name__": "docs_" + "".join(c if c.isalnum() else "_" for c in scenario)}
    for block in blocks:
        if block.hidden:
            _run_code(block.hidden, block, block.line - block.hidden.count("\n") - 1,
                      "hidden setup", namespace)
        if block.lang == "sh":
            printed = _run_commands(block)
        else:
            printed = _run_code(block.code, block, block.line + 1, "sample", namespace)
        if block.output is not None:
            assert output_matches(block.output, printed), (
                f"{block.where} prints:\n{printed}\nthe page says:\n{block.output}")
        for line, check in block.checks:
            _run_code(check, block, line, "check", namespace)
    # Test functions a sample defines (the testing how-to's) run too.
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()


def _settings_blocks() -> list[Block]:
    return [b for b in BLOCKS if b.kind == "settings"]


@pytest.mark.parametrize("block", _settings_blocks(), ids=lambda b: b.where)
def test_settings_sample(block):
    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    for app in namespace.get("INSTALLED_APPS", []):
        if isinstance(app, str):
            assert importlib.util.find_spec(app.split(".")[0]), f"{block.where}: no app {app}"
    for database in namespace.get("DATABASES", {}).values():
        if database["ENGINE"].endswith("sqlite3"):  # a sample follows its own advice
            assert sqlite_wal_warnings(database) == [], block.where
    if "PIKKU_WORKFLOWS" in namespace:
        with override_settings(PIKKU_WORKFLOWS=namespace["PIKKU_WORKFLOWS"]):
            for key in DEFAULTS:  # unknown keys and invalid values raise here
                getattr(pikku_settings, key)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "urls"], ids=lambda b: b.where)
def test_urls_sample(block):
    namespace: dict = {"path": path, "include": include}
    exec(compile(block.code, block.where, "exec"), namespace)


def test_every_python_sample_is_run_or_says_why_not():
    for block in BLOCKS:
        if block.kind == "skip":
            assert block.args, f"{block.where}: a skipped block must say why"
        if block.lang in ("py", "python3", "pycon"):
            pytest.fail(f"{block.where}: write python blocks as ```python")
        if block.lang == "python":
            assert block.kind in {None, "scenario", "skip", "settings", "urls", "tutorial"}, (
                f"{block.where}: a python block cannot be {block.kind!r}")
        if block.lang == "sh":
            assert block.kind in {"scenario", "skip", "tutorial"}, (
                f"{block.where}: run this shell block (scenario) or say why not (skip)")
        if block.kind == "tutorial":
            assert block.path.name == "tutorial.md", block.where
        # ini and yaml: the tests above; js: the browser test of the stream; text is
        # output or a signature, not code.
        assert block.lang in {"python", "sh", "text", "ini", "yaml", "js"}, (
            f"{block.where}: no test runs {block.lang or 'unmarked'} blocks")
    # A scenario's name holds together blocks of one page only.
    assert SCENARIOS


def _config_blocks(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang and b.kind != "skip"]


@pytest.mark.parametrize("block", _config_blocks("ini"), ids=lambda b: b.where)
def test_service_samples_start_commands_with_options_they_take(block):
    """systemd and supervisor samples: each command line parses as its command's own
    parser would parse it (an unknown option or a wrong value exits)."""
    config = configparser.ConfigParser(interpolation=None, strict=True)
    config.read_string(block.code)
    lines = [value for section in config.sections() for key, value in config[section].items()
             if key in ("execstart", "command")]
    assert lines, f"{block.where}: no command line"
    for line in lines:
        words = shlex.split(line)
        name, args = words[words.index("manage.py") + 1], words[words.index("manage.py") + 2:]
        command = load_command_class(get_commands()[name], name)
        try:
            command.create_parser("manage.py", name).parse_args(args)
        except SystemExit:
            pytest.fail(f"{block.where}: manage.py {name} refuses {args}")


@pytest.mark.parametrize("block", _config_blocks("yaml"), ids=lambda b: b.where)
def test_scrape_config_samples_scrape_the_metrics_view(block, client, db):
    """A Prometheus job of the docs, as Prometheus would send it, gets the metrics."""
    job = yaml.safe_load(block.code)["scrape_configs"][0]
    with override_settings(PIKKU_WORKFLOWS={"METRICS_TOKEN": "scrape-t0ken"}):
        response = client.get(job["metrics_path"], HTTP_AUTHORIZATION=(
            f"{job['authorization']['type']} scrape-t0ken"))
    assert response.status_code == 200, block.where
    assert b"# TYPE pikku_workflow_runs gauge" in response.content


def test_the_site_builds_with_no_warning(tmp_path: Path):
    """``make docs``: MkDocs in strict mode (a broken link or anchor is an error)."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tutorial" / "index.html").exists()


def test_every_page_is_in_the_navigation():
    """A page missing from ``nav`` is built but linked from nowhere on the site."""
    nav = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w/-]+\.md)\s*$", nav, flags=re.MULTILINE))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").glob("**/*.md")}
    assert pages - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - pages == set()


def test_every_setting_is_in_the_settings_reference():
    from pikku_workflows.conf import DEFAULTS

    page = (ROOT / "docs" / "settings.md").read_text()
    missing = [key for key in DEFAULTS if f"| `{key}` |" not in page or f'"{key}":' not in page]
    assert not missing, f"docs/settings.md lacks {missing}"
