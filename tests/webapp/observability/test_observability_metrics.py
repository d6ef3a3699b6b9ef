"""/metrics: who may read it, and that each series says what happened — request latency,
outbox depth and age, attestation verdicts, telemetry by generation and node, cost by
tenant, ledger submit and commit latency — and that several processes add up."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from tests.webapp.helpers import lines as bill_lines
from tests.webapp.observability.helpers import ACTOR, parse, place_one_gpu_lease, scrape, value
from webapp.attestation.models import Attestation
from webapp.config import env_networks
from webapp.fleet import partitions
from webapp.fleet.models import TelemetrySample
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.observability import views
from webapp.outbox import records
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

ROOT = Path(__file__).resolve().parents[3]
A100_BOARD_W = 400


@pytest.mark.django_db
def test_metrics_is_served_to_loopback_and_a_token_only(client, settings):
    assert client.get("/metrics").status_code == 200
    outsider = Client(REMOTE_ADDR="203.0.113.9")
    assert outsider.get("/metrics").status_code == 404
    settings.METRICS_TOKEN = secrets.token_urlsafe(24)
    bearer = f"Bearer {settings.METRICS_TOKEN}"
    assert outsider.get("/metrics", HTTP_AUTHORIZATION=bearer).status_code == 200
    assert outsider.get("/metrics", HTTP_AUTHORIZATION=bearer + "x").status_code == 404
    settings.METRICS_ALLOWED_NETWORKS = ()  # behind a proxy: the token alone
    assert client.get("/metrics").status_code == 404


@pytest.mark.django_db
def test_request_latency_is_observed_by_route_and_status(client, django_user_model):
    name = "wattlease_http_request_duration_seconds_count"
    client.force_login(django_user_model.objects.create_user("op", "", "pw", is_staff=True))
    before = scrape(client)
    for _ in range(3):
        assert client.get("/dashboard/data.json").status_code == 200
    client.get("/no/such/page")
    after = scrape(client)
    labels = {"method": "GET", "route": "dashboard/data.json", "status": "200"}
    assert value(after, name, **labels) - value(before, name, **labels) == 3
    missing = {"method": "GET", "route": "unmatched", "status": "404"}
    assert value(after, name, **missing) - value(before, name, **missing) == 1
    under_slo = value(after, "wattlease_http_request_duration_seconds_bucket", le="0.1", **labels)
    assert under_slo <= value(after, name, **labels)


@pytest.mark.django_db
def test_outbox_depth_and_age_of_the_oldest_unsent_row(client):
    records.enqueue("test:a", "RecordAttestation", {"node_id": "n", "nonce": "00"})
    records.enqueue("test:b", "RecordAttestation", {"node_id": "n", "nonce": "01"})
    OutboxEntry.objects.filter(business_key="test:a").update(
        created=timezone.now() - timedelta(minutes=10)
    )
    series = scrape(client)
    assert value(series, "wattlease_outbox_rows", status="pending") == 2
    assert value(series, "wattlease_outbox_rows", status="done") == 0
    assert 600 <= value(series, "wattlease_outbox_oldest_unsent_age_seconds") < 700
    OutboxEntry.objects.update(status=OutboxEntry.DONE)
    assert value(scrape(client), "wattlease_outbox_oldest_unsent_age_seconds") == 0


def test_telemetry_by_generation_and_node_power_against_board_power(client, fleet):
    now_ms = int(timezone.now().timestamp() * 1000)
    partitions.ensure_days([now_ms])  # as the store does before it inserts (PostgreSQL)
    for i, gpu in enumerate(fleet.gpus):  # four A100s drawing 500 W each: over their 400 W
        TelemetrySample.objects.create(
            gpu=gpu,
            t_ms=now_ms,
            energy_mj=1_000_000 * (i + 1),
            power_mw=500_000,
            util_gpu_pct=80,
            util_mem_pct=40,
            temp_c=60,
        )
    series = scrape(client)
    gen = {"generation": "A100-SXM4-80GB"}
    assert value(series, "wattlease_gpu_utilisation_ratio", **gen) == pytest.approx(0.8)
    assert value(series, "wattlease_gpu_memory_bandwidth_utilisation_ratio", **gen) == 0.4
    assert value(series, "wattlease_gpu_power_watts", **gen) == 500
    assert value(series, "wattlease_gpu_energy_joules_total", **gen) == 10_000  # 1+2+3+4 kJ
    node = {"node": fleet.node.name}
    assert value(series, "wattlease_node_power_watts", **node) == 2000
    assert value(series, "wattlease_node_board_power_watts", **node) == 4 * A100_BOARD_W


def test_cost_by_tenant_counts_a_lease_with_two_settlements_once(client, fleet, tenant):
    lease = place_one_gpu_lease(tenant, fleet.gpus, [])
    actions.activate_lease(lease, actor=ACTOR)
    actions.end_lease(lease, actor=ACTOR)
    lease = Lease.objects.get(pk=lease.pk)
    actions.settle_lease(lease, bill_lines(lease, count=2, watts=300), actor=ACTOR)
    totals = [line.total_micro for line in lease.settlements.all()]
    assert len(totals) == 2 and all(totals)
    series = scrape(client)
    slug = {"tenant": tenant.name}
    quoted = lease.price_total_micro / 1e6
    assert value(series, "wattlease_tenant_cost", part="priced", **slug) == quoted > 0
    assert value(series, "wattlease_tenant_cost", part="billed", **slug) == sum(totals) / 1e6


def test_attestation_verdicts_are_counted_by_reason(client, attested_node):
    name = "wattlease_attestation_verdicts_total"
    before = scrape(client)
    Attestation.objects.create(
        node=attested_node.node,
        nonce="ff" * 16,
        valid=False,
        reasons=[{"code": "pcr_mismatch", "detail": "PCR 7", "severity": "error"}],
        quote=b"",
        signature=b"",
    )
    after = scrape(client)
    refused = {"valid": "false", "reason": "pcr_mismatch"}
    assert value(after, name, **refused) - value(before, name, **refused) == 1
    # the fixture's own quote, verified through the agent API, counted as a valid verdict
    assert value(after, name, valid="true", reason="ok") >= 1


def test_ledger_submit_and_commit_latency_per_function(
    client, attested_node, ledger, fleet, tenant
):
    before = scrape(client)
    place_one_gpu_lease(tenant, fleet.gpus, [attested_node])
    assert relay_once(ledger) == {"done": 1}
    after = scrape(client)
    for name, outcome in (
        ("wattlease_ledger_submit_duration_seconds_count", "submitted"),
        ("wattlease_ledger_commit_duration_seconds_count", "done"),
    ):
        labels = {"function": "CreateLease", "outcome": outcome}
        assert value(after, name, **labels) - value(before, name, **labels) == 1


REQUESTS_PER_PROCESS = 3
WORKER = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django.setup()
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
for _ in range({n}):
    Client(HTTP_HOST="localhost").get("/no/such/page")
"""


def test_several_processes_add_up_in_multiprocess_mode(tmp_path, monkeypatch):
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "WATTLEASE_DATA_DIR": str(tmp_path / "data"),
    }
    (tmp_path / "metrics").mkdir()
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", WORKER.format(n=REQUESTS_PER_PROCESS)],
            cwd=ROOT,
            env={**os.environ, **env},
            check=True,
            timeout=120,
        )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", env["PROMETHEUS_MULTIPROC_DIR"])
    from prometheus_client import generate_latest

    series = parse(generate_latest(views._process_registry()).decode())
    labels = {"method": "GET", "route": "unmatched", "status": "404"}
    count = value(series, "wattlease_http_request_duration_seconds_count", **labels)
    assert count == 2 * REQUESTS_PER_PROCESS


def test_a_bad_allowed_network_stops_start_up_naming_the_variable(monkeypatch):
    monkeypatch.setenv("METRICS_ALLOWED_NETWORKS", "127.0.0.1/32, 10.0.0.0/33")
    with pytest.raises(ImproperlyConfigured, match=r"METRICS_ALLOWED_NETWORKS: '10\.0\.0\.0/33'"):
        env_networks("METRICS_ALLOWED_NETWORKS", "")
    monkeypatch.setenv("METRICS_ALLOWED_NETWORKS", " ")
    assert env_networks("METRICS_ALLOWED_NETWORKS", "127.0.0.1") == ()
