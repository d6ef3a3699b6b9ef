"""Request budgets as atomic counters: at most `limit` hits of one budget in any window of
`window_s` seconds (a sliding window), counted in one step per check, so processes and
threads racing each other cannot both take the last hit.

One semantics, two stores behind one interface (`BudgetStore`):
- `RedisBudgets`: a sorted set per budget (`wattlease:budget:<scope>:<ident>`, each member a
  hit, its score the hit's time in microseconds on Redis's clock), checked and added to by
  one Lua script (EVALSHA, one round trip); the key expires a window after its newest hit.
  Shared by every worker that talks to the same Redis.
- `MemoryBudgets`: the same sorted hits per budget in one process's memory, behind a lock.
  Development and single-process runs only: each process counts alone.

Why a sliding window and not a fixed one: a fixed window (INCR on `<key>:<window number>`)
lets 2 x limit through around each window's edge, so "at most 20 failed authentications a
minute" would not hold for any minute; the sliding window holds it for every window, exactly
as the budgets promised before (DRF's SimpleRateThrottle counts the same way). It costs a
sorted set of at most `limit` members per budget (a refused hit is not stored) instead of one
integer, and a check is O(log limit) in Redis (docs/benchmarks.md, "Request budgets").

A hit can be given back (`give_back`): the failed-authentication budget takes a hit before a
credential is checked, so that racing guesses each need a hit of their own, and gives it
back when the credential was good."""

from __future__ import annotations

import bisect
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

US_PER_S = 1_000_000
KEY_PREFIX = "wattlease:budget:"
SWEEP_EVERY_TAKES = 1024  # MemoryBudgets forgets budgets whose hits all expired this often


@dataclass(frozen=True)
class Take:
    """One check of a budget: `allowed`, the hit's id when it was (for `give_back`), and
    when refused, the seconds until the oldest hit in the window leaves it."""

    allowed: bool
    hit: str | None = None
    retry_after_s: float = 0.0


class BudgetStore(Protocol):
    def take(self, key: str, limit: int, window_s: float) -> Take:
        """Count one hit of budget `key` if fewer than `limit` hits fell in the last
        `window_s` seconds; otherwise refuse and count nothing."""

    def give_back(self, key: str, hit: str) -> None:
        """Uncount a hit `take` allowed (nothing if it already left the window)."""

    def clear(self) -> None:
        """Forget every budget (tests; an operator lifting all limits at once)."""


def _us(seconds: float) -> int:
    return round(seconds * US_PER_S)


def _new_hit() -> str:
    return secrets.token_hex(8)


# KEYS[1]: the budget's sorted set. ARGV: limit, window (µs), now (µs; "" = Redis's clock),
# the new hit's member. Returns {1, 0} when the hit was counted, {0, µs to wait} otherwise.
TAKE_SCRIPT = """
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  return {1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] == nil then
  return {0, window}
end
return {0, tonumber(oldest[2]) + window - now}
"""


class RedisBudgets:
    """Budgets in Redis, shared by every process using it. `clock` (seconds) is for tests
    that need to stand at a window's edge; by default every check reads Redis's own clock,
    so workers on hosts whose clocks differ still count in one timeline."""

    def __init__(self, client: Any, clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self._clock = clock
        self._take = client.register_script(TAKE_SCRIPT)  # EVALSHA; EVAL after a NOSCRIPT

    def take(self, key: str, limit: int, window_s: float) -> Take:
        now = "" if self._clock is None else str(_us(self._clock()))
        hit = _new_hit()
        allowed, wait_us = self._take(
            keys=[KEY_PREFIX + key], args=[limit, _us(window_s), now, hit]
        )
        if allowed:
            return Take(allowed=True, hit=hit)
        return Take(allowed=False, retry_after_s=int(wait_us) / US_PER_S)

    def give_back(self, key: str, hit: str) -> None:
        self._client.zrem(KEY_PREFIX + key, hit)

    def clear(self) -> None:
        for found in self._client.scan_iter(match=KEY_PREFIX + "*", count=1000):
            self._client.unlink(found)


class MemoryBudgets:
    """Budgets in this process's memory, for development: the same answers as RedisBudgets
    (tests/webapp/core/test_budgets.py runs both through one specification)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._hits: dict[str, list[tuple[int, str]]] = {}  # sorted (µs, hit) as a ZSET
        self._windows: dict[str, int] = {}
        self._takes = 0

    def take(self, key: str, limit: int, window_s: float) -> Take:
        window = _us(window_s)
        with self._lock:
            now = _us(self._clock())
            self._takes += 1
            if self._takes % SWEEP_EVERY_TAKES == 0:
                self._sweep(now)
            hits = self._hits.setdefault(key, [])
            del hits[: bisect.bisect_right(hits, (now - window, "\U0010ffff"))]
            self._windows[key] = window
            if len(hits) < limit:
                hit = _new_hit()
                bisect.insort(hits, (now, hit))
                return Take(allowed=True, hit=hit)
            wait = hits[0][0] + window - now if hits else window
            return Take(allowed=False, retry_after_s=wait / US_PER_S)

    def give_back(self, key: str, hit: str) -> None:
        with self._lock:
            hits = self._hits.get(key, [])
            for index, (_, held) in enumerate(hits):
                if held == hit:
                    del hits[index]
                    return

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()
            self._windows.clear()

    def __len__(self) -> int:
        """Budgets held in memory (a budget whose hits all left the window goes at the next
        sweep, as a Redis key expires)."""
        return len(self._hits)

    def sweep(self) -> None:
        with self._lock:
            self._sweep(_us(self._clock()))

    def _sweep(self, now: int) -> None:
        for key in [
            k for k, hits in self._hits.items() if not hits or hits[-1][0] <= now - self._windows[k]
        ]:
            del self._hits[key]
            del self._windows[key]


_store: BudgetStore | None = None
_store_lock = threading.Lock()


def store() -> BudgetStore:
    """This process's budgets: in Redis when the default cache is (REDIS_URL is set), on the
    cache's own Redis client and connection pool, taken once and shared by every thread;
    otherwise in this process's memory."""
    global _store
    if _store is not None:  # every request asks: no lock once it is chosen
        return _store
    with _store_lock:
        if _store is None:
            from django.core.cache import caches

            from webapp.core.cache import RedisCache

            cache = caches["default"]
            if isinstance(cache, RedisCache):
                _store = RedisBudgets(cache.redis_client())
            else:
                _store = MemoryBudgets()
        return _store
