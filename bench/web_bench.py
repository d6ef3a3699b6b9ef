"""The tenant API at rising fixed request rates on PostgreSQL and Redis, production settings:
the highest rate at which p99 stays under the SLO, and the CPU each request costs.

    python bench/web_bench.py [--layouts wsgi2,asgi2] [--endpoint list|create|bare|list+bare]
                              [--rates 50,100,200,...] [--seconds 10] [--slo-ms 100]

`list` is `GET /api/v1/leases/` for a tenant with 20 leases; `create` is `POST
/api/v1/leases/` (one FP16 GPU for an hour: a lease row, its audit row and outbox row);
`bare` is the baseline of issue 23, the same 20 rows from a plain Django view behind the same
middleware, authentication and budgets (bench/bare_view.py); `list+bare` runs both at each
rate on the same server, one after the other, so their ratio is of one run.
Layouts: `daphne` (one process, the demo's server), `asgiN` (gunicorn, N native ASGI
workers), `wsgiN` (gunicorn, N sync WSGI workers: plain HTTP, no keep-alive), `gthreadN`
(gunicorn, N WSGI workers of GTHREAD_THREADS threads each, keep-alive). Each layout gets a
fresh private PostgreSQL and Redis (tests/services.py).

Open loop: request i is due at start + i / rate, whatever happened to the others; a pool of
keep-alive client threads sends each when due and its latency counts from when it was due,
so a server that falls behind shows the queue in its latency (no coordinated omission).
Rates rise until p99 passes the SLO twice in a row. The CPU each request costs (user +
system from /proc, the server's processes, PostgreSQL's and Redis's, and this load
generator's) is robust to other work on the machine, unlike the rates.
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

from bench.proc_cpu import machine_busy_s, process_cpu_s, self_cpu_s  # noqa: E402
from tests.services import (  # noqa: E402
    _wait_for_port,
    free_port,
    temporary_postgres,
    temporary_redis,
)

PY = sys.executable
LEASES = 20
SEED = "from bench.web_bench import seed; print(seed(%d))"
DEFAULT_RATES = "50,100,150,200,250,300,350,400,450,500,600,700,800"
GTHREAD_THREADS = 4  # per gthread worker: keep-alive connections without one process each
CLIENT_THREADS = 48  # enough keep-alive connections that the client never holds a slot back
WARM_S = 2.0
ERROR_EXAMPLES = 3
FAILURES_TO_STOP = 2  # consecutive rates over the SLO
MS_PER_S = 1000
MACHINE = "(machine)"
CREATE_BODY = json.dumps({"gpu_count": 1, "precision": "FP16", "hours": "1"}).encode()


def seed(leases: int) -> str:
    """A tenant with `leases` leases and a write key for it (Django set up); returns the key."""
    from decimal import Decimal

    from webapp.leasing.models import Lease
    from webapp.tenancy.actions import issue_api_key
    from webapp.tenancy.models import ApiKey, Tenant

    tenant = Tenant.objects.create(
        name="Bench", slug="bench", max_queued_requests=10**6, max_gpus=10**6
    )
    Lease.objects.bulk_create(
        Lease(tenant=tenant, gpu_count=1, precision="FP16", hours=Decimal(1)) for _ in range(leases)
    )
    return issue_api_key(tenant, scope=ApiKey.WRITE, actor="bench")[1]


def production_env(database_url: str, redis_url: str) -> dict[str, str]:
    """The production settings the bench serves with (budgets on, but never refusing)."""
    return {
        **os.environ,
        # the production settings plus the baseline's one URL (bench/bare_view.py)
        "DJANGO_SETTINGS_MODULE": "bench.bare_settings",
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


def command(layout: str, port: int) -> list[str]:
    if layout == "daphne":
        return [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"]
    kind, workers = layout.rstrip("0123456789"), layout.lstrip("abcdefghijklmnopqrstuvwxyz")
    app = "webapp.asgi:application" if kind == "asgi" else "webapp.wsgi:application"
    worker_class = {"asgi": "asgi", "wsgi": "sync", "gthread": "gthread"}[kind]
    threads = ["--threads", str(GTHREAD_THREADS)] if kind == "gthread" else []
    return [PY, "-m", "gunicorn", "-c", "python:webapp.gunicorn_conf",
            "--worker-class", worker_class, "--workers", workers, *threads,
            "--bind", f"127.0.0.1:{port}", "--log-level", "warning",
            *os.environ.get("WEB_BENCH_GUNICORN_ARGS", "").split(), app]  # fmt: skip


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def listener_pid(port: int) -> int:
    """The process listening on a loopback TCP port (PostgreSQL's postmaster, Redis)."""
    hex_port = f"{port:04X}"
    inodes = {
        line.split()[9]
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for line in Path(table).read_text().splitlines()[1:]
        if line.split()[1].endswith(f":{hex_port}") and line.split()[3] == "0A"
    }
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd).removeprefix("socket:[").removesuffix("]") in inodes:
                    return int(entry.name)
        except OSError:
            continue
    raise RuntimeError(f"nothing listens on port {port}")


class Cpu:
    """CPU seconds of named process trees (re-read at each sample: workers and database
    backends come and go) and of this process."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        # every process seen under each root with its CPU at the last read: one that has
        # exited since (a database backend, autovacuum) keeps what it had used
        self.seen: dict[str, dict[int, float]] = {name: {} for name in roots}

    def read(self) -> dict[str, float]:
        out = {}
        for name, root in self.roots.items():
            for pid in descendants(root):
                self.seen[name][pid] = max(self.seen[name].get(pid, 0.0), process_cpu_s(pid))
            out[name] = sum(self.seen[name].values())
        out["load generator"] = self_cpu_s()
        out[MACHINE] = machine_busy_s()
        return out


def send(connection: http.client.HTTPConnection, endpoint: str, key: str) -> str | None:
    """Send one request; None when it was answered as it should be, else what came back."""
    headers = {"Authorization": f"Bearer {key}"}
    if endpoint in ("list", "bare"):
        url = "/api/v1/leases/" if endpoint == "list" else "/bench/bare-leases/"
        connection.request("GET", url, headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.status == 200 and json.loads(body)["count"] >= LEASES:
            return None
        return f"{response.status} {body[:200]!r}"
    headers["Content-Type"] = "application/json"
    connection.request("POST", "/api/v1/leases/", body=CREATE_BODY, headers=headers)
    response = connection.getresponse()
    body = response.read()
    return None if response.status == 201 else f"{response.status} {body[:200]!r}"


def fixed_rate(port: int, key: str, endpoint: str, rate: float, seconds: float) -> dict:
    """Send `rate` requests per second for `seconds`, each when due; latencies from due."""
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05
    lock = threading.Lock()
    state = {"next": 0}
    latencies: list[float] = []
    errors: list[str] = []

    def worker() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= total:
                break
            due = start + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            try:
                wrong = send(connection, endpoint, key)
            except (OSError, http.client.HTTPException) as exc:
                wrong = repr(exc)
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            latencies.append(time.perf_counter() - due)
            if wrong is not None:
                errors.append(wrong)
        connection.close()

    threads = [threading.Thread(target=worker) for _ in range(CLIENT_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "rate": rate,
        "requests": len(latencies),
        "achieved_per_s": round(len(latencies) / elapsed, 1),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:ERROR_EXAMPLES],
        "p50_ms": round(cuts[49] * MS_PER_S, 1),
        "p99_ms": round(cuts[98] * MS_PER_S, 1),
    }


def run_layout(layout: str, endpoint: str, rates: list[float], seconds: float, slo_ms: float):
    """Yield one result per rate, then the layout's summary."""
    with temporary_postgres() as database_url, temporary_redis() as redis_url:
        env = production_env(database_url, redis_url)
        subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        key = subprocess.run(
            [PY, "manage.py", "shell", "-c", SEED % LEASES],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.split()[-1]  # fmt: skip
        port = free_port()
        # the server's JSON access log goes to a file, as a process manager would keep it
        log = open(Path(env["WATTLEASE_DATA_DIR"]) / "server.log", "wb")  # noqa: SIM115
        server = subprocess.Popen(
            command(layout, port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_for_port(port, server, layout)
            cpu = Cpu({
                "server": server.pid,
                "postgres": listener_pid(int(database_url.rsplit(":", 1)[1].split("/")[0])),
                "redis": listener_pid(int(redis_url.rsplit(":", 1)[1].split("/")[0])),
            })  # fmt: skip
            fixed_rate(port, key, "list", 50, WARM_S)  # every worker loads its code
            endpoints = ["list", "bare"] if endpoint == "list+bare" else [endpoint]
            best = dict.fromkeys(endpoints)
            failures = dict.fromkeys(endpoints, 0)
            for rate, endpoint in ((r, e) for r in rates for e in endpoints):
                if failures[endpoint] >= FAILURES_TO_STOP:
                    continue
                load = os.getloadavg()[0]
                before = cpu.read()
                result = fixed_rate(port, key, endpoint, rate, seconds)
                after = cpu.read()
                used = {k: after[k] - before[k] for k in after}
                machine = used.pop(MACHINE)
                wall = result["requests"] / result["achieved_per_s"]
                result.update({
                    # what the rest of the machine (other users) kept busy meanwhile
                    "other_cores_busy": round(max(0.0, machine - sum(used.values())) / wall, 2),
                    "layout": layout,
                    "endpoint": endpoint,
                    "load_average_1m": round(load, 2),
                    "cpu_ms_per_request": {
                        k: round(v / result["requests"] * MS_PER_S, 3) for k, v in used.items()
                    },
                    "cpu_ms_per_request_all": round(
                        sum(used.values()) / result["requests"] * MS_PER_S, 3
                    ),
                })  # fmt: skip
                yield result
                if result["p99_ms"] < slo_ms and not result["errors"]:
                    best[endpoint], failures[endpoint] = rate, 0
                else:
                    failures[endpoint] += 1
                if all(f >= FAILURES_TO_STOP for f in failures.values()):
                    break
            for endpoint, rate in best.items():
                yield {"layout": layout, "endpoint": endpoint, "slo_ms": slo_ms,
                       "highest_rate_within_slo": rate}  # fmt: skip
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="wsgi3,asgi2")
    parser.add_argument(
        "--endpoint", choices=("list", "create", "bare", "list+bare"), default="list"
    )
    parser.add_argument("--rates", default=DEFAULT_RATES)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--slo-ms", type=float, default=100.0)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    for layout in args.layouts.split(","):
        for line in run_layout(layout, args.endpoint, rates, args.seconds, args.slo_ms):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
