"""What one request-budget check costs (webapp/core/budgets.py), against a private Redis.

    python bench/budget_bench.py [--checks 20000]

Each case makes --checks checks from one thread over loopback and prints, per check, the
client's wall time, its round trips to Redis and the Redis server's CPU (INFO cpu):
- `atomic, allowed, new budgets`: RedisBudgets.take on a fresh key each time (the per-address
  budget of many addresses), one EVALSHA;
- `atomic, allowed, growing set`: one budget with room for every check (its sorted set grows to
  --checks members: the worst case, a rate far above what is used);
- `atomic, refused, 20 held`: one full budget of 20 (a guesser over its budget);
- `old: cache get + set`: what DRF's SimpleRateThrottle did per allowed check before, through
  the same Redis cache client (webapp/core/cache.py): GET the pickled list of 20 times, SET it
  back (two round trips, and racy);
- `memory, allowed` / `memory, refused`: MemoryBudgets.take, for comparison."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WINDOW_S = 3600  # no hit leaves its window during a run


TOP_LEVEL = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_get", "cmdstat_set", "cmdstat_zrem")


def _redis_cpu_s(client) -> float:
    cpu = client.info("cpu")
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def timed(client, checks: int, check: Callable[[int], object]) -> dict:
    """Client wall time, round trips (the commands the client sent: a script's own commands
    are not round trips) and the Redis process's CPU (INFO cpu), per check."""
    client.config_resetstat()
    cpu_before = _redis_cpu_s(client)
    started = time.perf_counter()
    for n in range(checks):
        check(n)
    wall_s = time.perf_counter() - started
    cpu_s = _redis_cpu_s(client) - cpu_before
    stats = client.info("commandstats")
    trips = sum(stats[name]["calls"] for name in TOP_LEVEL if name in stats)
    return {
        "client_us_per_check": round(wall_s / checks * 1e6, 1),
        "round_trips_per_check": round(trips / checks, 2),
        "redis_cpu_us_per_check": round(cpu_s / checks * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=20000)
    args = parser.parse_args()

    import django
    from django.conf import settings

    settings.configure()
    django.setup()
    import redis

    from tests.services import temporary_redis
    from webapp.core.budgets import MemoryBudgets, RedisBudgets
    from webapp.core.cache import RedisCache

    results = {}
    with temporary_redis() as url:
        client = redis.Redis.from_url(url)
        budgets = RedisBudgets(client)
        budgets.take("warm", 1, WINDOW_S)  # the script is loaded once, before the timing
        results["atomic, allowed, new budgets"] = timed(
            client, args.checks, lambda n: budgets.take(f"ip:{n}", 50, 1)
        )
        results["atomic, allowed, growing set"] = timed(
            client, args.checks, lambda n: budgets.take("key:all", 10**9, WINDOW_S)
        )
        for _ in range(20):
            budgets.take("auth_failure:full", 20, WINDOW_S)
        results["atomic, refused, 20 held"] = timed(
            client, args.checks, lambda n: budgets.take("auth_failure:full", 20, WINDOW_S)
        )
        cache = RedisCache(url, {})
        cache.set("throttle_ip_old", [time.time() - i for i in range(20)], WINDOW_S)

        def old_check(n: int) -> None:  # SimpleRateThrottle.allow_request, allowed
            now = time.time()
            history = [t for t in cache.get("throttle_ip_old", []) if t > now - WINDOW_S]
            history.insert(0, now)
            cache.set("throttle_ip_old", history[:20], WINDOW_S)

        results["old: cache get + set (20 held)"] = timed(client, args.checks, old_check)
        memory = MemoryBudgets()
        for kind, limit in (("allowed", 10**9), ("refused", 20)):
            started = time.perf_counter()
            for _ in range(args.checks):
                memory.take(kind, limit, WINDOW_S)
            per_check = (time.perf_counter() - started) / args.checks * 1e6
            results[f"memory, {kind}"] = {"client_us_per_check": round(per_check, 1)}
    print(json.dumps({"checks": args.checks, "results": results}, indent=2))


if __name__ == "__main__":
    main()
