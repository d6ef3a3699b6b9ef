"""Audit rows and after-commit events: the two side effects every write action has.

Events go to the channel layer only once the transaction commits, so a dashboard never
shows a change that was rolled back (Zulip's `send_event_on_commit`).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from webapp.core.models import AuditEvent

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"


def audit(actor: str, action: str, obj: Any, **data: Any) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor,
        action=action,
        object_type=obj._meta.model_name,
        object_id=str(obj.pk),
        data=data,
    )


def publish_on_commit(kind: str, **payload: Any) -> None:
    """Tell live dashboards that something of `kind` changed, after the commit."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(
                DASHBOARD_GROUP, {"type": "fleet.changed", "kind": kind, "payload": payload}
            )
        except Exception:  # a dashboard push must never fail the write that caused it
            log.warning("could not publish %s event to the channel layer", kind, exc_info=True)

    transaction.on_commit(send)
