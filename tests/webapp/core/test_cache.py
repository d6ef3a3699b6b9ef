"""The Redis cache (webapp/core/cache.py) against a real Redis server: one client per pool,
shared by threads, and what one process writes another reads (the request budgets)."""

from __future__ import annotations

import threading

from tests.services import temporary_redis
from webapp.core.cache import RedisCache

THREADS = 8
INCREMENTS = 50


def test_every_operation_shares_one_client_and_another_process_sees_its_writes():
    with temporary_redis() as url:
        cache = RedisCache(url, {})
        cache.set("budget", [1.5, 2.5], 30)
        assert cache.get("budget") == [1.5, 2.5]
        assert cache._cache.get_client(write=True) is cache._cache.get_client(write=False)
        assert RedisCache(url, {}).get("budget") == [1.5, 2.5]  # another worker's view
        cache.delete("budget")
        assert cache.get("budget", "gone") == "gone"


def test_threads_share_the_client_without_losing_an_update():
    with temporary_redis() as url:
        cache = RedisCache(url, {})
        cache.set("count", 0, 30)

        def add() -> None:
            for _ in range(INCREMENTS):
                cache.incr("count")

        threads = [threading.Thread(target=add) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert cache.get("count") == THREADS * INCREMENTS
