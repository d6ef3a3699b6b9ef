"""A real Prometheus (the built binary, on loopback, its own data folder) scrapes the
running server's /metrics; after some traffic its HTTP API returns the series."""

from __future__ import annotations

import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from tests.services import free_port
from tests.webapp.observability.binaries import get_json, require, stop, wait_until
from webapp.observability.binaries import PROMETHEUS

SCRAPE_INTERVAL = "1s"
START_TIMEOUT_S = 60
SERIES_TIMEOUT_S = 60
TRAFFIC = 5


@dataclass
class Prometheus:
    base: str
    process: subprocess.Popen
    log: Path


@pytest.fixture
def prometheus(live_server, tmp_path: Path) -> Iterator[Prometheus]:
    """Prometheus scraping `live_server`."""
    port = free_port()
    target = urllib.parse.urlsplit(live_server.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: wattlease\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    log = tmp_path / "prometheus.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                str(require(PROMETHEUS, "prometheus")),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            "Prometheus ready",
            lambda: urllib.request.urlopen(base + "/-/ready", timeout=5).status == 200,
            process,
            log,
            START_TIMEOUT_S,
        )
        yield Prometheus(base, process, log)
    finally:
        stop(process)


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    answer = get_json(url)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_running_server(live_server, prometheus, django_user_model):
    # The operator dashboard is staff-only: read it with a staff session's cookie.
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("op", "", "pw", is_staff=True))
    cookie = staff.cookies[settings.SESSION_COOKIE_NAME]
    dashboard = urllib.request.Request(
        live_server.url + "/dashboard/data.json",
        headers={"Cookie": f"{cookie.key}={cookie.value}"},
    )
    for _ in range(TRAFFIC):
        with urllib.request.urlopen(dashboard, timeout=10) as r:
            assert r.status == 200
            assert r.url == dashboard.full_url  # not redirected to a login page
    requests = 'wattlease_http_request_duration_seconds_count{route="dashboard/data.json"}'
    found = wait_until(
        "the request series in Prometheus",
        lambda: [r for r in query(prometheus.base, requests) if float(r["value"][1]) >= TRAFFIC],
        prometheus.process,
        prometheus.log,
        SERIES_TIMEOUT_S,
    )
    assert found[0]["metric"]["job"] == "wattlease"
    assert found[0]["metric"]["status"] == "200"
    (up,) = query(prometheus.base, 'up{job="wattlease"}')
    assert up["value"][1] == "1"
    for name in ("wattlease_outbox_rows", "wattlease_outbox_oldest_unsent_age_seconds"):
        assert query(prometheus.base, name), f"{name} was not scraped"
