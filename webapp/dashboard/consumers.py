"""Websocket that tells open dashboards when something changed; the page then re-reads
/dashboard/data.json. Change notices are coalesced on the client side."""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from webapp.core.events import DASHBOARD_GROUP


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if settings.DASHBOARD_LOGIN_REQUIRED and not (user and user.is_authenticated):
            await self.close(code=4403)
            return
        # readings of individual GPUs go to operators only
        self.staff = bool(user and user.is_authenticated and user.is_staff)
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def fleet_changed(self, event):
        payload = event.get("payload", {})
        if event["kind"] == "telemetry" and not self.staff:
            payload = {"count": payload.get("count")}
        await self.send_json({"kind": event["kind"], "payload": payload})
