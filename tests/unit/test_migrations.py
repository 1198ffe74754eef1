"""The migrations match the models, in one clean chain."""

from __future__ import annotations

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
