"""Audit rows and after-commit events: the two side effects every write action has.

Events go to the channel layer only once the transaction commits, so a dashboard never
shows a change that was rolled back (Zulip's `send_event_on_commit`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from webapp.core.models import AuditEvent

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"
PUBLISH_TIMEOUT_S = 2.0  # a send the channel layer has not taken by then is logged, not waited for


class _PublisherLoop:
    """One event loop per process, on a daemon thread, for sends from synchronous code (the
    WSGI workers, the ledger relay, the lease worker). `async_to_sync` would start a loop for
    every event, and channels_redis, whose connection pools are per loop, would open and close
    a Redis connection with it. Started on first use, and again in a process forked after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # a fork has no such thread
                self._loop = asyncio.new_event_loop()
                self._pid = os.getpid()
                threading.Thread(
                    target=self._loop.run_forever, name="channel-layer-publisher", daemon=True
                ).start()
            return self._loop


_publisher = _PublisherLoop()


def _group_send(layer: Any, message: dict[str, Any]) -> None:
    if isinstance(layer, InMemoryChannelLayer):  # its queues belong to the server's own loop
        async_to_sync(layer.group_send)(DASHBOARD_GROUP, message)
        return
    sent = asyncio.run_coroutine_threadsafe(
        layer.group_send(DASHBOARD_GROUP, message), _publisher.loop()
    )
    sent.result(timeout=PUBLISH_TIMEOUT_S)


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
            _group_send(layer, {"type": "fleet.changed", "kind": kind, "payload": payload})
        except Exception:  # a dashboard push must never fail the write that caused it
            log.warning("could not publish %s event to the channel layer", kind, exc_info=True)

    transaction.on_commit(send)
