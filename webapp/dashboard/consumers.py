"""Websocket that tells open dashboards when something changed; the page then re-reads
/dashboard/data.json. Change notices are coalesced on the client side."""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.core.events import DASHBOARD_GROUP
from webapp.dashboard.access import may_view

FORBIDDEN_CLOSE_CODE = 4403


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if not may_view(user):
            await self.close(code=FORBIDDEN_CLOSE_CODE)
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
