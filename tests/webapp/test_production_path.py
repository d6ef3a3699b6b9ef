"""The services the environment names are the ones in use: `make test` runs this module
once on SQLite with the in-memory layer, and once on a private PostgreSQL and Redis."""

from __future__ import annotations

import os

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from webapp.core import budgets
from webapp.core.events import DASHBOARD_GROUP, publish_on_commit


@pytest.mark.django_db
def test_runs_on_the_database_named_by_database_url():
    expected = (
        "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    )
    assert connection.vendor == expected


def test_channel_layer_is_the_one_named_by_redis_url():
    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if os.environ.get("REDIS_URL"):
        assert backend == "channels_redis.core.RedisChannelLayer"
    else:
        assert backend == "channels.layers.InMemoryChannelLayer"


def test_request_budgets_are_counted_where_redis_url_says():
    if os.environ.get("REDIS_URL"):
        assert isinstance(budgets.store(), budgets.RedisBudgets)
    else:
        assert isinstance(budgets.store(), budgets.MemoryBudgets)


@pytest.mark.django_db(transaction=True)
def test_dashboard_events_reach_subscribers_after_commit():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(DASHBOARD_GROUP, channel)
    try:
        from django.db import transaction

        with transaction.atomic():
            publish_on_commit("lease", id=1, state="placed")
        message = async_to_sync(layer.receive)(channel)
        assert message == {
            "type": "fleet.changed",
            "kind": "lease",
            "payload": {"id": 1, "state": "placed"},
        }
    finally:
        async_to_sync(layer.group_discard)(DASHBOARD_GROUP, channel)
