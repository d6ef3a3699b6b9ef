"""Throughput and latency of `GET /api/leases/` (a tenant with 20 leases) on PostgreSQL and
Redis, production settings, for the serving layouts worth comparing.

    python bench/web_bench.py [--clients 8] [--seconds 15] [--layouts daphne,asgi2,wsgi4]

Layouts: `daphne` (one process, the demo's server), `asgiN` (gunicorn with N native ASGI
workers: the documented production server, websockets included), `wsgiN` (gunicorn with N
sync WSGI workers: plain HTTP only). Each gets a fresh private PostgreSQL and Redis
(tests/services.py). `--clients` threads each send requests back to back over one
keep-alive connection; prints requests per second and latency percentiles per layout. The
load generator runs on the same machine, so it takes some of its CPU.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.services import (  # noqa: E402
    _wait_for_port,
    free_port,
    temporary_postgres,
    temporary_redis,
)

PY = sys.executable
LEASES = 20
SEED = """
from decimal import Decimal
from webapp.leasing.models import Lease
from webapp.tenancy.actions import issue_api_key
from webapp.tenancy.models import ApiKey, Tenant
tenant = Tenant.objects.create(name="Bench", slug="bench", max_queued_requests=100)
Lease.objects.bulk_create(
    Lease(tenant=tenant, gpu_count=1, precision="FP16", hours=Decimal(1)) for _ in range(%d)
)
print(issue_api_key(tenant, scope=ApiKey.READ, actor="bench")[1])
"""


def command(layout: str, port: int) -> list[str]:
    if layout == "daphne":
        return [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"]
    kind, workers = layout[:4], layout[4:]
    app = {"asgi": "webapp.asgi:application", "wsgi": "webapp.wsgi:application"}[kind]
    worker_class = {"asgi": "asgi", "wsgi": "sync"}[kind]
    return [PY, "-m", "gunicorn", "--worker-class", worker_class, "--workers", workers,
            "--bind", f"127.0.0.1:{port}", "--log-level", "warning", app]  # fmt: skip


def client(port: int, key: str, until: float, latencies: list[float], errors: list[int]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {key}"}
    while time.monotonic() < until:
        started = time.perf_counter()
        connection.request("GET", "/api/v1/leases/", headers=headers)
        response = connection.getresponse()
        body = response.read()
        latencies.append(time.perf_counter() - started)
        if response.status != 200 or json.loads(body)["count"] != LEASES:
            errors.append(response.status)
    connection.close()


def run_layout(layout: str, clients: int, seconds: float) -> dict:
    with temporary_postgres() as database_url, temporary_redis() as redis_url:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "WATTLEASE_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "0",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "WATTLEASE_DATA_DIR": tempfile.mkdtemp(prefix="wattlease-bench-"),
            # the budgets stay on (they cost Redis round trips) but never refuse here
            "API_RATE_PER_KEY": "1000000/s",
            "API_RATE_PER_IP": "1000000/s",
        }
        subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        key = subprocess.run(
            [PY, "manage.py", "shell", "-c", SEED % LEASES],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.split()[-1]  # fmt: skip
        port = free_port()
        server = subprocess.Popen(command(layout, port), cwd=ROOT, env=env)
        try:
            _wait_for_port(port, server, layout)
            warm: list[float] = []
            client(port, key, time.monotonic() + 2, warm, [])  # every worker loads its code
            latencies: list[float] = []
            errors: list[int] = []
            until = time.monotonic() + seconds
            threads = [
                threading.Thread(target=client, args=(port, key, until, latencies, errors))
                for _ in range(clients)
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
        finally:
            server.terminate()
            server.wait(timeout=30)
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "layout": layout,
        "clients": clients,
        "requests": len(latencies),
        "errors": len(errors),
        "req_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(cuts[49] * 1000, 1),
        "p99_ms": round(cuts[98] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--layouts", default="daphne,asgi2,wsgi4")
    args = parser.parse_args()
    for layout in args.layouts.split(","):
        print(json.dumps(run_layout(layout, args.clients, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
