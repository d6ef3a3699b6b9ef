"""The operator dashboard shows every tenant's costs: staff only, over HTTP and over its
websocket; anonymous callers see nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from webapp.dashboard.consumers import FORBIDDEN_CLOSE_CODE, DashboardConsumer

PAGES = ("/", "/dashboard/data.json")


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("operator", password="x" * 20, is_staff=True)


@pytest.fixture
def tenant_user(db):
    return get_user_model().objects.create_user("someone", password="x" * 20)


def test_anonymous_callers_are_sent_to_log_in_and_see_no_data(client, db):
    for page in PAGES:
        response = client.get(page)
        assert response.status_code == 302, page
        assert response["Location"].startswith("/admin/login/")
        assert b"tenant" not in response.content


def test_a_user_who_is_not_staff_is_refused(client, tenant_user):
    client.force_login(tenant_user)
    for page in PAGES:
        assert client.get(page).status_code == 403, page


def test_staff_see_the_dashboard(client, staff):
    client.force_login(staff)
    assert client.get("/").status_code == 200
    assert "cost" in client.get("/dashboard/data.json").json()


def connect(user) -> tuple[bool, object]:
    async def attempt():
        communicator = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
        communicator.scope["user"] = user
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    return async_to_sync(attempt)()


@pytest.mark.django_db
def test_the_websocket_needs_staff(staff, tenant_user):
    assert connect(AnonymousUser()) == (False, FORBIDDEN_CLOSE_CODE)
    assert connect(tenant_user) == (False, FORBIDDEN_CLOSE_CODE)
    assert connect(staff)[0] is True
