"""The operator's dashboards over time: staff only, every range, the numbers behind each
plot (from raw samples for short ranges, from the hourly rollups for long ones), the node
page with a real failed quote and the PCR that differs, and the ledger page."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from attest.agent.http import attest_once
from ledger import money
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.webapp import leases
from tests.webapp.conftest import enrol_node
from webapp.dashboard.ranges import RANGES
from webapp.fleet.models import Node, TelemetrySample
from webapp.fleet.telemetry import record_samples
from webapp.leasing import bills
from webapp.leasing.models import Lease
from webapp.outbox.relay import relay_once

PAGES = ("utilisation", "cost", "ledger", "capacity")


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("op", "", "pw", is_staff=True))
    return client


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_pages_are_for_staff_only(client, fleet):
    tenant_user = Client()
    tenant_user.force_login(get_user_model().objects.create_user("t", "", "pw"))
    for url in [f"/ops/{p}/" for p in PAGES] + [f"/ops/{p}/data.json" for p in PAGES]:
        for caller in (client, tenant_user):
            response = caller.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    assert client.get("/ops/nodes/node-1/data.json").status_code == 302


def test_every_page_and_range_answers(staff, fleet):
    for name in PAGES:
        assert staff.get(f"/ops/{name}/").status_code == 200
        for rng in RANGES:
            assert staff.get(f"/ops/{name}/data.json?range={rng}").status_code == 200
    assert staff.get("/ops/nodes/node-1/").status_code == 200
    assert staff.get("/ops/nodes/nope/").status_code == 404
    assert staff.get("/ops/nope/").status_code == 404


def test_a_bad_range_is_named(staff, fleet):
    response = staff.get("/ops/utilisation/data.json?range=3y")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("range='3y' is not one of 1h, 6h")


def test_utilisation_per_generation_and_site_with_queueing_flags(staff, fleet):
    now = _now_ms() - 120_000
    now -= now % 60_000
    gpus = fleet.gpus
    record_samples(
        [
            Sample(gpus[0].uuid, now, 1, 400_000, 90, 10, 70),  # busy, starved of bandwidth
            Sample(gpus[1].uuid, now, 1, 400_000, 80, 60, 70),
            Sample(gpus[2].uuid, now, 1, 50_000, 0, 0, 35),
            Sample(gpus[0].uuid, now + 30_000, 2, 400_000, 70, 20, 70),
        ]
    )
    body = staff.get("/ops/utilisation/data.json?range=1h").json()
    a100 = body["generations"]["A100-SXM4-80GB"]
    assert a100["t"] == [now]
    assert a100["util"] == [round((90 + 80 + 0 + 70) / 4 / 100, 4)]
    assert a100["mem"] == [round((10 + 60 + 0 + 20) / 4 / 100, 4)]
    assert body["sites"][fleet.site.name]["util"] == a100["util"]
    assert "gpus" not in body  # a fleet's GPUs are drawn per node, not all on one page
    # the symptom is judged per GPU-hour: GPU 0's hour averages 80 % compute, 15 % bandwidth
    assert [(f["gpu"], f["uuid"]) for f in body["flags"]] == [
        ("node-1/0 A100-SXM4-80GB", gpus[0].uuid)
    ]
    heat = staff.get("/ops/nodes/node-1/data.json?range=1h").json()["gpu_heat"]
    assert heat["labels"] == [f"node-1/{i}" for i in range(4)]
    assert heat["t"] == [now]
    assert heat["util"] == [[0.8], [0.8], [0.0], [None]]
    assert heat["mem"] == [[0.15], [0.6], [0.0], [None]]


def test_long_ranges_read_the_hourly_rollups_not_the_samples(staff, fleet):
    hour = _now_ms() - 3 * 3_600_000
    hour -= hour % 3_600_000
    record_samples(Sample(g.uuid, hour + 60_000, 1, 300_000, 50, 25, 60) for g in fleet.gpus)
    TelemetrySample.objects.all().delete()  # only the rollups are left
    body = staff.get("/ops/utilisation/data.json?range=24h").json()
    assert body["generations"]["A100-SXM4-80GB"] == {
        "t": [hour],
        "util": [0.5],
        "mem": [0.25],
        "power_w": [300.0],
    }
    assert staff.get("/ops/utilisation/data.json?range=1h").json()["generations"] == {}


def test_cost_over_time_by_tenant_and_generation_with_energy(staff, fleet, tenant, outsider):
    mine = leases.settled(leases.active(tenant, fleet.gpus[:2]), watts=300)
    theirs = leases.settled(leases.active(outsider.tenant, fleet.gpus[2:3]), watts=500)
    body = staff.get("/ops/cost/data.json?range=24h").json()
    lines = {lease.tenant.name: lease.settlements.get() for lease in (mine, theirs)}
    for name, line in lines.items():
        assert sum(body["by_tenant"][name]["micro"]) == line.total_micro > 0
        quoted = Lease.objects.get(tenant__name=name).price_total_micro
        assert sum(body["quoted_by_tenant"][name]["micro"]) == quoted > 0
    billed = sum(line.total_micro for line in lines.values())
    assert sum(body["by_generation"]["A100-SXM4-80GB"]["micro"]) == billed
    assert billed == sum(bills.totals_by_tenant().values())
    planned = sum(
        money.Terms.of(line.lease.terms).planned_mj(line.start_ms, line.end_ms)
        for line in lines.values()
    )
    assert sum(body["energy"]["attributed_mj"]) == planned > 0
    measured = sum(line.measured_energy_mj for line in lines.values())
    assert sum(body["energy"]["measured_mj"]) == measured > 0
    assert body["energy"]["without_terms"] == 0


def test_node_page_shows_a_failed_quote_and_the_pcr_that_differs(
    staff, fleet, agent, api, attested_node
):
    # as the demo's tampered node: PCR 7 is extended after a good quote
    golden = Node.objects.get(pk=fleet.node.pk).pcr_policy.pcrs["sha256"]["7"]
    ak = enrol_node(agent, api)  # enrolled while it booted as the policy says
    agent.extend_pcr(7, b"a changed boot configuration")
    measured = agent.read_pcrs("sha256:7")["sha256"][7].hex()
    verdict = attest_once(agent, api, ak)
    assert verdict["valid"] is False, verdict
    body = staff.get("/ops/nodes/node-1/data.json?range=1h").json()
    assert body["node"]["trust"] == "failed"
    assert body["timeline"]["valid"][-1] is False and True in body["timeline"]["valid"]
    (failed,) = body["failed"]
    assert failed["differing_pcrs"] == [
        {"bank": "sha256", "pcr": "7", "expected": golden, "measured": measured}
    ]
    assert failed["reasons"]
    assert [g["index"] for g in body["gpus"]] == [0, 1, 2, 3]


def test_ledger_page_counts_commits_codes_and_depth(staff, attested_node, ledger):
    body = staff.get("/ops/ledger/data.json?range=1h").json()
    assert sum(body["transactions"]) == 3  # RegisterNode, IssueChallenge, RecordAttestation
    assert sum(body["tx_per_s"]) == pytest.approx(3 / 60, abs=1e-3)
    assert body["codes"] == {"VALID": 3}
    assert body["pending_now"] == 0 and body["depth"]["waiting"][-1] == 0
    assert all(v is not None and v >= 0 for v in body["latency_ms"]["p99"])
    relay_once(ledger)  # nothing new: the page stays the same
    assert staff.get("/ops/ledger/data.json?range=1h").json()["codes"] == {"VALID": 3}


def test_the_site_answers_the_browsers_favicon_request(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
