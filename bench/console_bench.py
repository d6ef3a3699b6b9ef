"""The operator dashboards in Debian's Chromium: how long a telemetry sample takes from its
write to its point drawn on an open page, and how long the busiest page takes to load with
four weeks of history.

    python bench/console_bench.py [--samples 200] [--gpus 64] [--days 28] [--loads 5]

Starts a private Redis (the channel layer the writer and the server share) and the ASGI
server (`manage.py runserver`, daphne) on a fresh SQLite database with a fleet of --gpus
GPUs, stores --days of history (one sample per GPU every 5 minutes, through record_samples,
which keeps the hourly rollups), logs in as staff and then:

1. latency: opens /ops/utilisation/?range=1h and, --samples times, writes one sample per
   GPU (record_samples, as the telemetry worker does) and waits until the page has painted
   its point (the page stamps the time in a requestAnimationFrame after extendTraces);
   prints p50/p99/max of write-start to painted, in ms;
2. page load: loads /ops/utilisation/ for 7d and 28d --loads times each and reports the
   median time from navigation start to all plots drawn, and the data.json size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
HISTORY_STEP_S = 300
PASSWORD = "bench-password-not-secret"
START_TIMEOUT_S = 60


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def setup_fleet(gpus: int, days: float) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from scheduler import api as scheduler
    from scheduler.telemetry.synthetic import SyntheticGpu
    from webapp.demo.seed import gpu_uuid
    from webapp.fleet.catalogue import sync_catalogue
    from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
    from webapp.fleet.telemetry import record_samples

    call_command("migrate", verbosity=0)
    sync_catalogue()
    site = Site.objects.create(name="bench")
    policy = PcrPolicy.objects.create(name="bench", pcrs={"sha256": {"7": "00" * 32}})
    generations = list(Generation.objects.order_by("catalogue_id"))
    uuids = []
    for n in range(gpus // 8):
        node = Node.objects.create(
            name=f"bench-{n:02d}",
            site=site,
            pcr_policy=policy,
            status=Node.ACTIVE,
            trust=Node.TRUSTED,
        )
        for i in range(8):
            gpu = GPU.objects.create(
                uuid=gpu_uuid(node.name, i),
                node=node,
                index=i,
                generation=generations[n % len(generations)],
            )
            uuids.append(gpu.uuid)
    get_user_model().objects.create_user("bench", "", PASSWORD, is_staff=True)
    now_ms = time.time_ns() // 1_000_000
    start = now_ms - int(days * 86_400_000)
    fleet = [SyntheticGpu(u, 400) for u in uuids]
    started, batch, stored = time.monotonic(), [], 0
    hours = days * 24 - 1
    for sample in scheduler.synthetic_trace(fleet, start, hours, step_s=HISTORY_STEP_S, seed=5):
        batch.append(sample)
        if len(batch) >= 20_000:
            stored += record_samples(batch).stored
            batch = []
    stored += record_samples(batch).stored
    print(
        f"history: {stored} samples of {len(uuids)} GPUs over {days} days stored "
        f"with their rollups in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    return uuids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=float, default=28)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()

    from tests.services import free_port, temporary_redis

    with tempfile.TemporaryDirectory() as data_dir, temporary_redis() as redis_url:
        env = {**os.environ, "WATTLEASE_DATA_DIR": data_dir, "REDIS_URL": redis_url}
        env.pop("DATABASE_URL", None)
        os.environ.update({k: env[k] for k in ("WATTLEASE_DATA_DIR", "REDIS_URL")})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        import django

        django.setup()
        uuids = setup_fleet(args.gpus, args.days)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            run_browser(f"http://127.0.0.1:{port}", uuids, args)
        finally:
            server.terminate()
            server.wait(timeout=30)


def run_browser(base: str, uuids: list[str], args: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    from scheduler.telemetry.sample import TelemetrySample
    from tests.webapp.dashboard.test_dashboard_browser import CHROMIUM_ARGS
    from webapp.fleet.telemetry import record_samples

    writer = ThreadPoolExecutor(max_workers=1)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                page.goto(base + "/admin/login/?next=/ops/utilisation/%3Frange%3D1h")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        page.fill("#id_username", "bench")
        page.fill("#id_password", PASSWORD)
        page.click("[type=submit]")
        page.wait_for_selector("#live.on", timeout=30_000)
        page.wait_for_selector("#chart-generation .main-svg", timeout=30_000)
        page.evaluate(
            "window.__drawn = {}; window.addEventListener('wattlease:drawn',"
            " e => { window.__drawn[e.detail.t] = e.detail.at; });"
        )
        latencies = []
        t_ms = time.time_ns() // 1_000_000
        for n in range(args.samples):
            t_ms = max(t_ms + 1000, time.time_ns() // 1_000_000)
            batch = [TelemetrySample(u, t_ms, 10**9 + n, 300_000, 60, 30, 60) for u in uuids]
            written = time.time_ns() / 1e6
            # the writer is the telemetry worker's call, on a thread of its own: Playwright's
            # sync API keeps an event loop on this one
            writer.submit(record_samples, batch).result()
            page.wait_for_function(f"window.__drawn[{t_ms}] !== undefined", timeout=10_000)
            latencies.append(page.evaluate(f"window.__drawn[{t_ms}]") - written)
        print(
            json.dumps(
                {
                    "latency_write_to_painted_ms": {
                        "samples": len(latencies),
                        "gpus_per_sample": len(uuids),
                        "p50": round(percentile(latencies, 50), 1),
                        "p99": round(percentile(latencies, 99), 1),
                        "max": round(max(latencies), 1),
                    }
                }
            ),
            flush=True,
        )
        for rng in ("7d", "28d"):
            times, size = [], 0
            for _ in range(args.loads):
                page.goto(f"{base}/ops/utilisation/?range={rng}")
                page.wait_for_function(
                    "document.body.dataset.drawnMs !== undefined", timeout=60_000
                )
                times.append(float(page.evaluate("document.body.dataset.drawnMs")))
                size = page.evaluate(
                    "performance.getEntriesByType('resource').filter(e => e.name.includes"
                    "('data.json')).map(e => e.transferSize)[0] || 0"
                )
            print(
                json.dumps(
                    {
                        "page_load_to_drawn_ms": {
                            "page": f"/ops/utilisation/?range={rng}",
                            "loads": len(times),
                            "median": round(statistics.median(times), 1),
                            "min": round(min(times), 1),
                            "max": round(max(times), 1),
                            "data_json_bytes": size,
                        }
                    }
                ),
                flush=True,
            )
        browser.close()
    writer.shutdown()


if __name__ == "__main__":
    main()
