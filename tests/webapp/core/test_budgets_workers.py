"""The failed-authentication budget holds across worker processes: 200 key guesses fired at
once from one address at a real gunicorn (4 worker processes of 4 threads each,
webapp/gunicorn_conf.py) sharing a real Redis; exactly the budget's worth are answered 401
and every other one 429.

Before the budgets were atomic (DRF's SimpleRateThrottle: read the list of hits from the
cache, check it, write it back after the key lookup) the workers each read the same old list:
on 2026-12-07 (Debian 12, 2 cores) this test, run against main's throttling, saw 52, 29 and 43
of the 200 guesses answered 401 with a budget of 20 (with 4 single-threaded sync workers: 34,
22 and 23); with the atomic budgets, 20 every time (docs/threat-model.md, A1)."""

from __future__ import annotations

import collections
import http.client
import json
import os
import secrets
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from tests.services import _wait_for_port, free_port, temporary_redis
from webapp.core.budgets import KEY_PREFIX

ROOT = Path(__file__).resolve().parents[3]
GUESSES = 200
BUDGET = 20  # failed authentications per address, per hour: no window ends during the test
WORKERS, THREADS = 4, 4  # 16 requests handled at once on 2 cores: they interleave
HTTP_TIMEOUT_S = 60.0


def _guess(port: int, start: threading.Barrier) -> tuple[int, dict]:
    token = f"wl_{secrets.token_urlsafe(6)}.{secrets.token_urlsafe(24)}"  # well-formed: looked up
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    connection.connect()
    start.wait()
    connection.request("GET", "/api/v1/leases/", headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    body = json.loads(response.read())
    body["retry_after"] = response.getheader("Retry-After")
    connection.close()
    return response.status, body


def test_parallel_key_guesses_get_no_more_than_the_budget_past_any_worker(tmp_path):
    with temporary_redis() as redis_url:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "WATTLEASE_ENV": "development",
            "WATTLEASE_DATA_DIR": str(tmp_path),
            "REDIS_URL": redis_url,
            "API_AUTH_FAILURES_PER_IP": f"{BUDGET}/hour",
            "API_RATE_PER_IP": "100000/s",  # only the failed-authentication budget is tested
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:webapp.gunicorn_conf",
             "--worker-class", "gthread", "--workers", str(WORKERS), "--threads", str(THREADS),
             "--bind", f"127.0.0.1:{port}", "webapp.wsgi:application"],
            cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            _wait_for_port(port, server, "gunicorn")
            start = threading.Barrier(GUESSES)
            with ThreadPoolExecutor(GUESSES) as pool:
                answers = list(pool.map(lambda _: _guess(port, start), range(GUESSES)))
            held = redis.Redis.from_url(redis_url).zcard(KEY_PREFIX + "auth_failure:127.0.0.1")
        finally:
            server.terminate()
            server.wait(timeout=30)
    statuses = collections.Counter(status for status, _ in answers)
    assert statuses == {401: BUDGET, 429: GUESSES - BUDGET}, statuses
    for status, body in answers:
        if status == 429:
            assert body["code"] == "throttled"
            assert body["detail"].startswith("[auth.throttled] ")
            assert 0 < int(body["retry_after"]) <= 3600
    assert held == BUDGET  # Redis holds one hit per failed guess, none for the refused
