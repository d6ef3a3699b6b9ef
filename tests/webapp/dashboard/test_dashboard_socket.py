"""The dashboard websocket: telemetry readings of individual GPUs reach staff only; others
are told only that something changed."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from webapp.core.events import DASHBOARD_GROUP
from webapp.dashboard.consumers import DashboardConsumer

EVENT = {
    "type": "fleet.changed",
    "kind": "telemetry",
    "payload": {"count": 1, "samples": [["GPU-1", 1, 90, 10, 300_000]]},
}


def _received(user) -> dict:
    async def run() -> dict:
        communicator = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
        communicator.scope["user"] = user
        connected, _ = await communicator.connect()
        assert connected
        await get_channel_layer().group_send(DASHBOARD_GROUP, EVENT)
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return message

    return async_to_sync(run)()


def test_staff_get_the_readings_and_others_only_the_count(db, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.DASHBOARD_LOGIN_REQUIRED = False
    staff = get_user_model().objects.create_user("op", "", "pw", is_staff=True)
    tenant_user = get_user_model().objects.create_user("t", "", "pw")
    assert _received(staff)["payload"] == EVENT["payload"]
    assert _received(tenant_user)["payload"] == {"count": 1}
    assert _received(AnonymousUser())["payload"] == {"count": 1}
