"""Django's Redis cache with one Redis client per connection pool, not one per call.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache operation
(its constructor fills a table of ~80 response callbacks each time); when the request
budgets were DRF's throttles they made five cache operations per API request, and that
construction was about a tenth of a lease list's CPU (bench/web_profile.py). The budgets
now take this client once per process (webapp/core/budgets.py). A `redis.Redis` is safe to
share between threads (each command takes a connection from the pool), and its pool
reconnects after a fork."""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._client(connection_pool=self._get_connection_pool(write))
            self._clients[index] = client
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient

    def redis_client(self) -> Any:
        """The `redis.Redis` this cache writes with (its connection pool), for the request
        budgets' scripts (webapp/core/budgets.py)."""
        return self._cache.get_client(write=True)
