"""The migrations match the models, in one clean chain."""

from __future__ import annotations

import hashlib
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

import pikku_workflows


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do():
    out = StringIO()
    call_command("makemigrations", "pikku_workflows", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_migration_numbers_are_unique():
    folder = Path(pikku_workflows.__file__).parent / "migrations"
    numbers = [p.name[:4] for p in folder.glob("[0-9][0-9][0-9][0-9]_*.py")]
    assert numbers and len(numbers) == len(set(numbers))


# --- Released migrations are frozen ----------------------------------------------------------

#: Each release and the last migration it ships. An upgrade starts from one of these.
RELEASES = {"0.1.0": "0009_mirror_outbox"}

#: The sha256 of every released migration file. A database migrated by a release has
#: applied these exact files: editing or renaming one leaves those databases apart from
#: fresh ones (0006 was rewritten after it landed, and a database migrated in between
#: failed with ``relation "pikku_step_waiting_updated" already exists``). Change the schema
#: with a new migration instead; add its hash here when it is released.
RELEASED_MIGRATIONS = {
    "0001_initial.py": "92119eb0df6c5ce5469bf3ff17a96908092049043e87464de094833bb4b8d1b7",
    "0002_console.py": "168c3b5bfc9a0a3261dfff43d8e16385ff310d754163e4be3f98622c3240d71f",
    "0003_step_attempt_base.py":
        "e67dbc0a40bfb5a92ea61f4c07ac29eb29233cc1cff7ff475579573c856a5c36",
    "0004_run_created_index.py":
        "a38e7f962c0ad1f641f8a85a086a4b36f92911ca2acc12dc9493303887fd6897",
    "0005_console_indexes.py":
        "307cc3fd1a57aeb7bfc501ec798781e622f6a79dac83f83e55651216a0584b24",
    "0006_fewer_index_writes.py":
        "7e0fd83d0fdee95d34168d55e1dcb819a1d4ff2bbcdcd2e01b729376b14b5c2d",
    "0007_idempotency_per_owner.py":
        "176defe8554f034ac5a16b3a0f029a13547effbc32ed4c20bcb92fff23934bed",
    "0008_attempt_created_at_from_the_engine.py":
        "aadd80f1b9de322935f943ed5d6c658ee49a2d1edd859675a19cba23f39d6360",
    "0009_mirror_outbox.py":
        "aaf5c971e1dd1610e33c9b0a3199e84e215078bbd61740e9943133e95054c24a",
}

MIGRATIONS = Path(pikku_workflows.__file__).parent / "migrations"


def _sha256(name: str) -> str:
    path = MIGRATIONS / name
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


def test_released_migrations_are_unchanged():
    changed = {name: _sha256(name) for name, digest in RELEASED_MIGRATIONS.items()
               if _sha256(name) != digest}
    assert changed == {}, (
        "a released migration must never change (edited, renamed or deleted): databases "
        "have applied it as it was. Restore it and add a new migration instead.")


def test_no_migration_slips_in_among_the_released_ones():
    """A migration numbered within the released range was inserted or renamed: every
    unreleased one comes after the last release's."""
    last = max(RELEASES.values())
    released = set(RELEASED_MIGRATIONS)
    unexpected = [p.name for p in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py")
                  if p.name not in released and p.name[:4] <= last[:4]]
    assert unexpected == []
    assert {f"{name}.py" for name in RELEASES.values()} <= released


def test_the_package_version_is_the_latest_release_with_a_changelog_entry():
    version = max(RELEASES, key=lambda v: tuple(int(part) for part in v.split(".")))
    assert pikku_workflows.__version__ == version
    changelog = (Path(pikku_workflows.__file__).parent.parent / "CHANGELOG.md").read_text()
    assert f"\n## [{version}]" in changelog


def _foreign_key_indexes() -> dict[str, list[str]]:
    """The run table's one-column plain indexes on its five foreign keys, by name."""
    from django.db import connection

    from pikku_workflows.models import WorkflowRun

    columns = {f"{name}_id" for name in ("owner", "parent_run", "forked_from", "forked_by",
                                         "schedule")}
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, WorkflowRun._meta.db_table)
    return {name: info["columns"] for name, info in constraints.items()
            if info["index"] and not info["primary_key"] and len(info["columns"]) == 1
            and info["columns"][0] in columns}


@pytest.mark.django_db(transaction=True)
def test_0022_swaps_the_foreign_keys_full_indexes_for_partial_ones_and_back():
    partial = {f"pikku_run_{name}": [f"{name}_id"]
               for name in ("parent_run", "forked_from", "forked_by", "schedule")}
    assert _foreign_key_indexes() == partial  # the owner's: pikku_run_owner_created
    try:
        call_command("migrate", "pikku_workflows", "0021", verbosity=0)
        before = _foreign_key_indexes()
        assert sorted(columns for columns in before.values()) == sorted(
            [["owner_id"], *partial.values()])
        assert not set(before) & set(partial)
        call_command("migrate", "pikku_workflows", verbosity=0)
        assert _foreign_key_indexes() == partial
    finally:
        call_command("migrate", "pikku_workflows", verbosity=0)
