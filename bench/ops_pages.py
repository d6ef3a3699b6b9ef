"""The operator pages at fleet size: every /ops/ page with 10,000 GPUs and 28 days of
hourly rollups, served by the production layout.

    python bench/ops_pages.py [--gpus 10000] [--days 28] [--loads 20] [--browser-loads 5]
                              [--samples 50]

Starts a private PostgreSQL and Redis (tests/services.py), migrates, and seeds in bulk, in SQL
(generate_series, no Python loop per row): --gpus GPUs (8 per node) over the rate card's sites
and the catalogue's generations, --days x 24 GpuHour rows per GPU, and the newest hour of raw
readings at the production cadence (one every 10 s per GPU), which the 1 h views and the
scaling advice read. Then it rolls the closed hours up into pools (`rollups.catch_up`, timed),
starts gunicorn with two ASGI workers (webapp.gunicorn_conf, WATTLEASE_ENV=production; the
static files, which a front web server serves in production, are served to the browser from
`collectstatic`'s folder by a Playwright route) and:

1. server time: each page's HTML and its data.json, --loads times each, one request at a
   time, at the default range (24 h) and at 28 d (and 1 h for the pages that read raw
   samples then); p50 / p99 / max of the request's wall time, and the JSON's size;
2. in Debian's Chromium (Playwright), logged in as staff: --browser-loads loads of every page
   at 28 d and 24 h (and the utilisation page at 1 h); first contentful paint and every plot
   drawn (the page stamps `data-drawn-ms` after drawing from its data.json), p50 / max, from
   navigation start. Playwright's routing turns the browser's HTTP cache off, so every load
   fetches and parses plotly.js (3.5 MB) again: "drawn" is a cold load's;
3. sample to drawn point: /ops/utilisation/?range=1h open, --samples times one node's 8
   readings stored through record_samples (the quote's path) and the page's paint of the
   point awaited, as bench/console_bench.py does at 64 GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
READY_S = 300.0
HOUR_MS = 3_600_000
SAMPLE_MS = 10_000  # the production cadence: a reading every 10 s
GPUS_PER_NODE = 8


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 1)


def production_django(tmp: str, database_url: str, redis_url: str, *more: list[str]) -> dict:
    """This process as a production deployment on a private PostgreSQL and Redis: the
    environment (returned, for the servers it starts), migrated, Django set up; `more`:
    further manage.py commands to run first."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "WATTLEASE_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "WATTLEASE_DATA_DIR": tmp,
        "LEDGER_PATH": str(Path(tmp) / "ledger.sqlite3"),
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    for command in (["migrate"], *more):
        subprocess.run([PY, "manage.py", *command, "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    return env


def seed_fleet(gpus: int) -> tuple[list, list, list]:
    """In bulk: the rate card's sites, the catalogue's generations, `gpus` GPUs on nodes of
    8, one node in ten not attested. Returns (sites, generations, nodes)."""
    from webapp.demo.seed import SITES
    from webapp.fleet.catalogue import sync_catalogue
    from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site

    sync_catalogue()
    sites = [Site.objects.create(name=name) for name in SITES]
    generations = list(Generation.objects.order_by("catalogue_id"))
    policy = PcrPolicy.objects.create(name="bench", pcrs={"sha256": {"7": "00" * 32}})
    trust = [Node.TRUSTED] * 18 + [Node.STALE, Node.FAILED]  # a few nodes not attested
    nodes = Node.objects.bulk_create(
        Node(
            name=f"n{n:05d}",
            site=sites[n % len(sites)],
            pcr_policy=policy,
            status=Node.ACTIVE,
            trust=trust[n % len(trust)],
        )
        for n in range(gpus // GPUS_PER_NODE)
    )
    GPU.objects.bulk_create(
        (
            GPU(
                uuid=f"GPU-bench-{node.pk:05d}-{i}",
                node=node,
                index=i,
                generation=generations[(n // len(sites)) % len(generations)],
            )
            for n, node in enumerate(nodes)
            for i in range(GPUS_PER_NODE)
        ),
        batch_size=5_000,
    )
    return sites, generations, nodes


def seed(gpus: int, days: int) -> dict[str, object]:
    from django.db import connection

    from webapp.fleet.models import GPU
    from webapp.fleet.partitions import ensure_days

    sites, generations, nodes = seed_fleet(gpus)
    now_ms = time.time_ns() // 1_000_000
    hour = now_ms - now_ms % HOUR_MS
    started = time.monotonic()
    with connection.cursor() as cursor:
        for day in range(days):
            first = hour - (days * 24 - 1) * HOUR_MS + day * 24 * HOUR_MS
            # u: a per-GPU, per-hour utilisation 0..99 that varies with the hour of day
            cursor.execute(
                """
                INSERT INTO fleet_gpuhour (gpu_id, hour_ms, samples, idle, util_sum, mem_sum,
                                           power_mw_sum, temp_sum, temp_max)
                SELECT g.id, h, 360, CASE WHEN u < 5 THEN 360 ELSE 0 END, 360 * u,
                       360 * ((u * 3) %% 60), 360 * (100000 + u * 5000), 360 * (40 + u / 3),
                       45 + u / 3
                FROM fleet_gpu g CROSS JOIN generate_series(%s::bigint, %s::bigint, %s) h
                CROSS JOIN LATERAL (SELECT ((g.id * 37 + (h / 3600000) * 7) %% 100)::int AS u) v
                """,
                [first, first + 23 * HOUR_MS, HOUR_MS],
            )
        rollups_s = time.monotonic() - started
        start = now_ms - HOUR_MS
        ensure_days([start, now_ms])
        started = time.monotonic()
        cursor.execute(
            """
            INSERT INTO fleet_telemetrysample (gpu_id, t_ms, energy_mj, power_mw, util_gpu_pct,
                                               util_mem_pct, temp_c)
            SELECT g.id, t, (t - %s) * 400, 100000 + u * 5000, u, (u * 3) %% 60, 40 + u / 3
            FROM fleet_gpu g CROSS JOIN generate_series(%s::bigint, %s::bigint, %s) t
            CROSS JOIN LATERAL (SELECT ((g.id * 37 + (t / 10000) * 11) %% 100)::int AS u) v
            """,
            [start, start, now_ms, SAMPLE_MS],
        )
        samples_s = time.monotonic() - started
        cursor.execute("ANALYZE")
        cursor.execute("SELECT count(*) FROM fleet_gpuhour")
        hours = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM fleet_telemetrysample")
        samples = cursor.fetchone()[0]
    return {
        "gpus": GPU.objects.count(),
        "nodes": len(nodes),
        "sites": len(sites),
        "generations": len(generations),
        "gpu_hours": hours,
        "gpu_hours_insert_s": round(rollups_s, 1),
        "samples_last_hour": samples,
        "samples_insert_s": round(samples_s, 1),
    }


def roll_up() -> dict[str, object]:
    from webapp.fleet import rollups
    from webapp.fleet.models import PoolHour

    started = time.monotonic()
    rollups.catch_up()
    return {
        "pool_hours": PoolHour.objects.count(),
        "catch_up_s": round(time.monotonic() - started, 1),
    }


def login_cookie() -> tuple[str, str]:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_user("bench", "", None, is_staff=True)
    client = Client()
    client.force_login(user)
    return settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value


def pages() -> dict[str, str]:
    from django.urls import reverse

    from webapp.fleet.models import GPU

    gpu = GPU.objects.select_related("node__site", "generation").order_by("pk").first()
    site, generation = gpu.node.site.name, gpu.generation.catalogue_id
    return {
        "fleet": reverse("ops-page", args=["fleet"]),
        "utilisation": reverse("ops-page", args=["utilisation"]),
        "cost": reverse("ops-page", args=["cost"]),
        "capacity": reverse("ops-page", args=["capacity"]),
        "ledger": reverse("ops-page", args=["ledger"]),
        "site": reverse("ops-site", args=[site]),
        "pool": reverse("ops-pool", args=[site, generation]),
        "node": reverse("ops-node", args=[gpu.node.name]),
        "gpu": reverse("ops-gpu", args=[gpu.uuid]),
    }


def timed_get(url: str, cookie: str) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
        assert response.status == 200, (url, response.status)
    return (time.perf_counter() - started) * 1000, len(body)


def server_times(base: str, cookie: str, urls: dict[str, str], loads: int) -> list[dict]:
    results = []
    for name, path in urls.items():
        ranges = ["24h", "28d"] + (["1h"] if name in ("utilisation", "node", "gpu", "pool") else [])
        targets = [("html", path)] + [(f"data {r}", f"{path}data.json?range={r}") for r in ranges]
        for what, target in targets:
            times, size = [], 0
            timed_get(base + target, cookie)  # a first request warms the worker's imports
            for _ in range(loads):
                ms, size = timed_get(base + target, cookie)
                times.append(ms)
            row = {
                "page": name,
                "request": what,
                "p50_ms": pct(times, 50),
                "p99_ms": pct(times, 99),
                "max_ms": round(max(times), 1),
                "bytes": size,
            }
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


def browser_times(base: str, cookie: tuple[str, str], urls: dict[str, str], args) -> list[dict]:
    from playwright.sync_api import sync_playwright

    from scheduler.telemetry.sample import TelemetrySample
    from tests.webapp.browser import CHROMIUM_ARGS
    from webapp.fleet.models import GPU
    from webapp.fleet.telemetry import record_samples

    results = []
    uuids = list(GPU.objects.order_by("pk").values_list("uuid", flat=True)[:GPUS_PER_NODE])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": base, "secure": False}])
        static_root = Path(os.environ["WATTLEASE_DATA_DIR"]) / "static"

        def serve_static(route) -> None:  # the front web server's job in production
            path = static_root / route.request.url.split("/static/", 1)[1].split("?")[0]
            route.fulfill(path=str(path)) if path.is_file() else route.fulfill(status=404)

        context.route("**/static/**", serve_static)
        page = context.new_page()
        for name, path in urls.items():
            for rng in ("28d", "24h") + (("1h",) if name == "utilisation" else ()):
                paint, drawn = [], []
                for _ in range(args.browser_loads):
                    page.goto(f"{base}{path}?range={rng}")
                    page.wait_for_function(
                        "document.body.dataset.drawnMs !== undefined", timeout=120_000
                    )
                    paint.append(
                        page.evaluate(
                            "performance.getEntriesByName('first-contentful-paint')[0].startTime"
                        )
                    )
                    drawn.append(float(page.evaluate("document.body.dataset.drawnMs")))
                row = {
                    "page": name,
                    "range": rng,
                    "first_paint_p50_ms": pct(paint, 50),
                    "first_paint_max_ms": round(max(paint), 1),
                    "drawn_p50_ms": pct(drawn, 50),
                    "drawn_max_ms": round(max(drawn), 1),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
        # sample -> drawn point, one node's readings at a time, as a quote stores them
        page.goto(base + urls["utilisation"] + "?range=1h")
        page.wait_for_selector("#live.on", timeout=60_000)
        page.evaluate(
            "window.__drawn = {}; window.addEventListener('wattlease:drawn',"
            " e => { window.__drawn[e.detail.t] = e.detail.at; });"
        )
        writer = ThreadPoolExecutor(max_workers=1)
        latencies = []
        t_ms = time.time_ns() // 1_000_000
        for n in range(args.samples):
            t_ms = max(t_ms + 1000, time.time_ns() // 1_000_000)
            batch = [TelemetrySample(u, t_ms, 10**12 + n, 300_000, 60, 30, 60) for u in uuids]
            written = time.time_ns() / 1e6
            writer.submit(record_samples, batch).result()
            page.wait_for_function(f"window.__drawn[{t_ms}] !== undefined", timeout=20_000)
            latencies.append(page.evaluate(f"window.__drawn[{t_ms}]") - written)
        writer.shutdown()
        row = {
            "sample_to_drawn_ms": {
                "samples": len(latencies),
                "p50": pct(latencies, 50),
                "p99": pct(latencies, 99),
                "max": round(max(latencies), 1),
            }
        }
        results.append(row)
        print(json.dumps(row), flush=True)
        browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--browser-loads", type=int, default=5)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()

    from tests.services import _wait_for_port, free_port, temporary_postgres, temporary_redis

    with (
        tempfile.TemporaryDirectory() as tmp,
        temporary_postgres() as database_url,
        temporary_redis() as redis_url,
    ):
        env = production_django(tmp, database_url, redis_url, ["collectstatic", "--no-input"])
        seeded = seed(args.gpus, args.days)
        print(json.dumps({"seeded": seeded}), flush=True)
        print(json.dumps({"rolled_up": roll_up()}), flush=True)
        cookie = login_cookie()
        urls = pages()
        port = free_port()
        log = (Path(tmp) / "server.log").open("w")
        server = subprocess.Popen(
            [PY, "-m", "gunicorn", "-c", "python:webapp.gunicorn_conf", "--worker-class",
             "asgi", "--workers", "2", "--bind", f"127.0.0.1:{port}", "webapp.asgi:application"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_for_port(port, server, "gunicorn")
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + READY_S
            while True:
                try:
                    timed_get(base + urls["fleet"], f"{cookie[0]}={cookie[1]}")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            server_times(base, f"{cookie[0]}={cookie[1]}", urls, args.loads)
            browser_times(base, cookie, urls, args)
        finally:
            server.terminate()
            server.wait(timeout=30)
            print((Path(tmp) / "server.log").read_text()[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
