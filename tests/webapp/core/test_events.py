"""Dashboard events sent from synchronous code (WSGI workers, the ledger relay) through the
Redis channel layer: one connection per process, not one per event."""

from __future__ import annotations

import redis
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer

from tests.services import temporary_redis
from webapp.core import events

EVENTS = 20


def test_sync_sends_share_one_redis_connection_and_arrive_in_order():
    with temporary_redis() as url:
        layer = RedisChannelLayer(hosts=[url])
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(events.DASHBOARD_GROUP, channel)
        server = redis.Redis.from_url(url)
        before = server.info("stats")["total_connections_received"]
        for n in range(EVENTS):
            events._group_send(
                layer, {"type": "fleet.changed", "kind": "lease", "payload": {"n": n}}
            )
        opened = server.info("stats")["total_connections_received"] - before
        assert opened <= 1, f"{opened} Redis connections for {EVENTS} events"
        received = [async_to_sync(layer.receive)(channel)["payload"]["n"] for _ in range(EVENTS)]
        assert received == list(range(EVENTS))
        server.close()
