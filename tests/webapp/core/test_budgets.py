"""The request budgets' counting (webapp/core/budgets.py), one specification for both stores:
RedisBudgets against a real Redis server (tests/services.py) and MemoryBudgets. A budget
allows a hit when fewer than `limit` hits it allowed (and were not given back) fell in the
last `window` — the half-open (now - window, now] — and a refusal says how long until the
oldest of them leaves it."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.services import temporary_redis
from webapp.core.budgets import (
    KEY_PREFIX,
    SWEEP_EVERY_TAKES,
    US_PER_S,
    BudgetStore,
    MemoryBudgets,
    RedisBudgets,
)

KINDS = ("redis", "memory")
START_S = 1_000_000.0  # a fake clock's first reading


class Clock:
    """A clock the test moves by hand, in whole microseconds as the stores count."""

    def __init__(self) -> None:
        self.us = round(START_S * US_PER_S)

    def __call__(self) -> float:
        return self.us / US_PER_S

    def advance(self, us: int) -> None:
        self.us += us


@pytest.fixture(scope="module")
def redis_client() -> Iterator[redis.Redis]:
    with temporary_redis() as url:
        yield redis.Redis.from_url(url)


@pytest.fixture(scope="module")
def make_store(redis_client) -> Callable[[str, Callable[[], float] | None], BudgetStore]:
    def make(kind: str, clock: Callable[[], float] | None) -> BudgetStore:
        if kind == "redis":
            return RedisBudgets(redis_client, clock)
        return MemoryBudgets(clock) if clock else MemoryBudgets()

    return make


def fresh_key() -> str:
    return f"test:{secrets.token_hex(6)}"


OPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3 * US_PER_S),  # µs the clock moves first
        st.one_of(st.just("take"), st.integers(min_value=0, max_value=20)),  # or give back #n
    ),
    max_size=40,
)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=5),
    window_ms=st.integers(min_value=1, max_value=5_000),
    ops=OPS,
)
def test_a_budget_allows_exactly_limit_hits_in_any_window(make_store, kind, limit, window_ms, ops):
    clock, key, window_us = Clock(), fresh_key(), window_ms * 1000
    store = make_store(kind, clock)
    granted: list[tuple[int, str]] = []  # (µs, hit) allowed and not given back
    for advance, op in ops:
        clock.advance(advance)
        if op != "take":
            if granted:
                store.give_back(key, granted.pop(op % len(granted))[1])
            continue
        live = sorted(t for t, _ in granted if t > clock.us - window_us)
        taken = store.take(key, limit, window_ms / 1000)
        assert taken.allowed == (len(live) < limit)
        if taken.allowed:
            assert taken.hit is not None and taken.retry_after_s == 0
            granted.append((clock.us, taken.hit))
        else:
            assert taken.hit is None
            assert round(taken.retry_after_s * US_PER_S) == live[0] + window_us - clock.us > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_hit_leaves_the_window_exactly_one_window_later(make_store, kind):
    clock, key = Clock(), fresh_key()
    store = make_store(kind, clock)
    assert store.take(key, 2, 10).allowed
    clock.advance(4 * US_PER_S)
    assert store.take(key, 2, 10).allowed
    clock.advance(6 * US_PER_S - 1)  # 1 µs before the first hit leaves
    refused = store.take(key, 2, 10)
    assert not refused.allowed and refused.retry_after_s == 1 / US_PER_S
    clock.advance(1)
    assert store.take(key, 2, 10).allowed  # (t - 10 s, t]: the hit at t - 10 s is out
    refused = store.take(key, 2, 10)
    assert not refused.allowed and refused.retry_after_s == 4.0  # the hit at 4 s is oldest


@pytest.mark.parametrize("kind", KINDS)
def test_waiting_retry_after_is_enough_and_no_less_is(make_store, kind):
    clock, key = Clock(), fresh_key()
    store = make_store(kind, clock)
    for _ in range(3):
        assert store.take(key, 3, 60).allowed
        clock.advance(7 * US_PER_S)
    refused = store.take(key, 3, 60)
    assert refused.retry_after_s == 60 - 21
    clock.advance(round(refused.retry_after_s * US_PER_S) - 1)
    assert not store.take(key, 3, 60).allowed
    clock.advance(1)
    assert store.take(key, 3, 60).allowed


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_hit_is_not_counted_and_budgets_are_separate(make_store, kind):
    clock, key, other = Clock(), fresh_key(), fresh_key()
    store = make_store(kind, clock)
    assert store.take(key, 1, 10).allowed
    for _ in range(5):
        assert not store.take(key, 1, 10).allowed  # refusals do not push the window on
    assert store.take(other, 1, 10).allowed
    clock.advance(10 * US_PER_S)
    assert store.take(key, 1, 10).allowed


@pytest.mark.parametrize("kind", KINDS)
def test_a_hit_given_back_frees_its_place_once(make_store, kind):
    clock, key = Clock(), fresh_key()
    store = make_store(kind, clock)
    first = store.take(key, 1, 10)
    store.give_back(key, first.hit)
    store.give_back(key, first.hit)  # twice: nothing more
    second = store.take(key, 1, 10)
    assert second.allowed
    assert not store.take(key, 1, 10).allowed
    clock.advance(11 * US_PER_S)
    store.give_back(key, second.hit)  # after it left the window: nothing
    assert store.take(key, 1, 10).allowed
    assert not store.take(key, 1, 10).allowed


@pytest.mark.parametrize("kind", KINDS)
def test_threads_racing_for_the_last_hits_get_exactly_the_limit(make_store, kind):
    store, key = make_store(kind, None), fresh_key()  # the store's own clock
    threads, tries, limit = 16, 40, 100
    start = threading.Barrier(threads)
    allowed = []

    def race() -> None:
        start.wait()
        allowed.append(sum(store.take(key, limit, 3600).allowed for _ in range(tries)))

    racers = [threading.Thread(target=race) for _ in range(threads)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sum(allowed) == limit


def test_redis_holds_one_member_per_hit_and_the_key_expires_a_window_after_the_last(
    redis_client,
):
    store, key = RedisBudgets(redis_client), fresh_key()  # Redis's own clock
    window_s = 0.3
    assert store.take(key, 2, window_s).allowed
    assert store.take(key, 2, window_s).allowed
    refused = store.take(key, 2, window_s)
    assert not refused.allowed and 0 < refused.retry_after_s <= window_s
    assert redis_client.zcard(KEY_PREFIX + key) == 2  # the refused hit is not stored
    assert 0 < redis_client.pttl(KEY_PREFIX + key) <= window_s * 1000
    time.sleep(refused.retry_after_s + 0.01)
    assert store.take(key, 2, window_s).allowed
    time.sleep(window_s + 0.05)
    assert not redis_client.exists(KEY_PREFIX + key)


def test_redis_loads_the_script_again_after_it_was_flushed(redis_client):
    store, key = RedisBudgets(redis_client), fresh_key()
    assert store.take(key, 1, 60).allowed
    redis_client.script_flush()  # as after a Redis restart: EVALSHA answers NOSCRIPT
    assert not store.take(key, 1, 60).allowed


def test_redis_clear_forgets_budgets_and_nothing_else(redis_client):
    store, key = RedisBudgets(redis_client), fresh_key()
    redis_client.set("not-a-budget", "kept")
    assert store.take(key, 1, 60).allowed
    store.clear()
    assert store.take(key, 1, 60).allowed
    assert redis_client.get("not-a-budget") == b"kept"


def test_memory_forgets_budgets_whose_hits_all_left_the_window():
    clock = Clock()
    store = MemoryBudgets(clock)
    for n in range(10):
        store.take(f"address:{n}", 5, 10)
    store.take("long", 5, 100)
    clock.advance(10 * US_PER_S)
    store.sweep()
    assert len(store) == 1  # only "long" still holds a hit in its window
    for _ in range(SWEEP_EVERY_TAKES):  # the sweep also runs by itself, every so many takes
        store.take("new", 1, 1)
        clock.advance(US_PER_S)
    assert len(store) == 1  # "long" left its window 100 s in and went; "new" is live
