"""Clients for the API tests: the owner of runs, another user, staff, anonymous."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

API = "/api/workflows/"


@pytest.fixture
def users(django_user_model):
    return {
        "owner": django_user_model.objects.create_user("owner", password="pw"),
        "other": django_user_model.objects.create_user("other", password="pw"),
        "staff": django_user_model.objects.create_user("staff", password="pw", is_staff=True),
    }


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def owner(users):
    return client_for(users["owner"])


@pytest.fixture
def other(users):
    return client_for(users["other"])


@pytest.fixture
def staff(users):
    return client_for(users["staff"])


@pytest.fixture
def anonymous():
    return client_for()
