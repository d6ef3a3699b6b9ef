"""Where one `GET /api/v1/leases/` (a tenant with 20 leases) spends its CPU, in-process.

    python bench/web_profile.py [--requests 2000] [--cprofile] [--path /bench/bare-leases/]

Production settings on a private PostgreSQL and Redis (tests/services.py), the request sent
through Django's test client (the whole middleware stack, DRF authentication, throttles,
serialisation, JSON logs), one thread: prints CPU microseconds per request, the SQL queries
and Redis round trips one request makes, and with `--cprofile` the functions that cost most.
`--path /bench/bare-leases/` profiles the web bench's baseline (bench/bare_view.py) instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

INNER = "WATTLEASE_WEB_PROFILE_INNER"
LIST_PATH = "/api/v1/leases/"
TOP_FUNCTIONS = 35


def outer(argv: list[str]) -> None:
    from bench.web_bench import LEASES, production_env
    from tests.services import temporary_postgres, temporary_redis

    with temporary_postgres() as database_url, temporary_redis() as redis_url:
        env = production_env(database_url, redis_url)
        env["ALLOWED_HOSTS"] = "testserver"
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env,
                       check=True)  # fmt: skip
        env[INNER] = str(LEASES)
        subprocess.run([sys.executable, __file__, *argv], cwd=ROOT, env=env, check=True)


def inner(requests: int, profile: bool, path: str) -> None:
    import logging

    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from bench.web_bench import seed

    # the access log goes to stderr in production; here it is formatted and dropped, so the
    # formatting cost stays in the figure without flooding the terminal
    for handler in logging.getLogger().handlers:
        handler.stream = open(os.devnull, "w")  # type: ignore[attr-defined]  # noqa: SIM115
    key = seed(int(os.environ[INNER]))
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    for _ in range(50):  # warm: imports, caches, connections
        assert client.get(path).status_code == 200
    if os.environ.get("WEB_PROFILE_GC_FREEZE"):
        import gc

        gc.collect()
        gc.freeze()
        if os.environ.get("WEB_PROFILE_GC_GEN0"):
            gc.set_threshold(int(os.environ["WEB_PROFILE_GC_GEN0"]), 10, 10)
    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    print(f"SQL queries per request: {len(queries)}")
    for query in queries.captured_queries:
        print("   ", query["sql"][:140])
    profiler = cProfile.Profile() if profile else None
    started_cpu, started = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    for _ in range(requests):
        client.get(path)
    if profiler:
        profiler.disable()
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
    print(json.dumps({
        "requests": requests,
        "cpu_us_per_request": round(cpu / requests * 1e6),
        "wall_us_per_request": round(wall / requests * 1e6),
        "cprofile": profile,
    }))  # fmt: skip
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(TOP_FUNCTIONS)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(TOP_FUNCTIONS)
        profiler.dump_stats(Path(tempfile.gettempdir()) / "web_profile.pstats")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--path", default=LIST_PATH, help="the URL (default: %(default)s)")
    args = parser.parse_args()
    if INNER in os.environ:
        inner(args.requests, args.cprofile, args.path)
    else:
        outer(sys.argv[1:])


if __name__ == "__main__":
    tempfile.tempdir = None
    main()
