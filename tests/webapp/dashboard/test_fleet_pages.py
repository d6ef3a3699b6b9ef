"""The fleet at any size: per generation and per site first, then a site's pools, a pool's
nodes (a page at a time), a node's GPUs and one GPU; the 28-day views read rollups only,
in a number of queries that does not grow with the fleet."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger.units import MS_PER_HOUR
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.webapp import leases
from webapp.dashboard import drill
from webapp.demo.seed import gpu_uuid
from webapp.fleet.models import GPU, Generation, Node, Site
from webapp.fleet.partitions import TABLE as SAMPLES
from webapp.fleet.telemetry import record_samples

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("op", "", "pw", is_staff=True))
    return client


def _add_node(name: str, site: Site, generation: str, policy, trust=Node.TRUSTED) -> list[GPU]:
    node = Node.objects.create(
        name=name, site=site, pcr_policy=policy, status=Node.ACTIVE, trust=trust
    )
    gen = Generation.objects.get(catalogue_id=generation)
    return [
        GPU.objects.create(uuid=gpu_uuid(name, i), node=node, index=i, generation=gen)
        for i in range(2)
    ]


@pytest.fixture
def two_sites(fleet):
    """The fleet's site with node-1 (4 A100s) and node-2 (2 H100s, failed attestation), and a
    second site with node-3 (2 H100s)."""
    other = Site.objects.create(name="second-site")
    policy = fleet.node.pcr_policy
    failed = _add_node("node-2", fleet.site, H100, policy, trust=Node.FAILED)
    far = _add_node("node-3", other, H100, policy)
    return fleet, failed, far, other


def _hour_ago(n: int) -> int:
    now = time.time_ns() // 1_000_000
    return now - now % MS_PER_HOUR - n * MS_PER_HOUR


def _readings(gpus, hour: int, util: int, mem: int, mw: int) -> list[Sample]:
    return [
        Sample(g.uuid, hour + k * 600_000, 1, mw, util, mem, 50 + k) for g in gpus for k in (0, 1)
    ]


def test_fleet_page_sums_per_generation_and_per_site(staff, two_sites, tenant):
    fleet, failed, far, other = two_sites
    closed, open_ = _hour_ago(3), _hour_ago(0)
    record_samples(_readings(fleet.gpus, closed, 60, 30, 300_000))
    record_samples(_readings(failed, closed, 20, 10, 500_000))
    record_samples(_readings(far, open_, 80, 40, 600_000))  # the open hour: summed when read
    leases.settled(leases.active(tenant, fleet.gpus[:2]), watts=300)
    body = staff.get("/ops/fleet/data.json?range=24h").json()
    gens = {g["name"]: g for g in body["generations"]}
    assert gens[A100]["gpus"] == 4 and gens[H100]["gpus"] == 4
    assert gens[H100]["quarantined"] == 2 and gens[H100]["free"] == 2  # node-2 failed
    assert gens[H100]["gpus_by_trust"] == {"unknown": 0, "trusted": 2, "failed": 2, "stale": 0}
    assert gens[A100]["util"] == 0.6 and gens[A100]["mem"] == 0.3
    # H100: two GPUs at 20 % in one hour, two at 80 % in another: 50 % of all samples
    assert gens[H100]["util"] == 0.5
    # the draw: 4 A100s x 300 W for one hour
    assert gens[A100]["power_w"] == 1200.0 and gens[A100]["energy_kwh"] == 1.2
    assert gens[H100]["energy_kwh"] == 2 * 0.5 + 2 * 0.6
    assert gens[H100]["temp_max"] == 51
    sites = {s["name"]: s for s in body["sites"]}
    assert sites[other.name]["gpus"] == 2 and sites[other.name]["nodes"] == 1
    assert sites[fleet.site.name]["nodes"] == 2 and sites[fleet.site.name]["util"] == round(
        (4 * 2 * 60 + 2 * 2 * 20) / 12 / 100, 4
    )
    billed = leases.Lease.objects.get().settlements.get().total_micro
    assert gens[A100]["billed_micro"] == billed == sites[fleet.site.name]["billed_micro"] > 0
    assert sites[other.name]["billed_micro"] == 0
    assert body["nodes_by_trust"] == {"unknown": 0, "trusted": 2, "failed": 1, "stale": 0}
    assert body["series"]["sites"][other.name]["util"] == [0.8]
    assert body["series"]["generations"][A100] == {"t": [closed], "util": [0.6], "mem": [0.3]}


def test_a_site_shows_its_pools_and_a_pool_its_nodes(staff, two_sites):
    fleet, failed, _far, _other = two_sites
    hour = _hour_ago(2)
    record_samples(_readings(fleet.gpus + failed, hour, 50, 20, 250_000))
    body = staff.get(f"/ops/sites/{fleet.site.name}/data.json?range=7d").json()
    assert [p["name"] for p in body["pools"]] == [A100, H100]
    assert body["nodes_by_trust"]["failed"] == 1
    pool = staff.get(f"/ops/sites/{fleet.site.name}/pools/{H100}/data.json?range=24h").json()
    assert [n["name"] for n in pool["nodes"]] == ["node-2"]
    (row,) = pool["nodes"]
    assert (row["trust"], row["gpus"], row["util"], row["power_w"]) == ("failed", 2, 0.5, 250.0)
    assert pool["heat"]["labels"] == ["node-2"] and pool["heat"]["util"] == [[0.5]]
    gpu = staff.get(f"/ops/gpus/{failed[1].uuid}/data.json?range=24h").json()
    assert gpu["gpu"]["node"] == "node-2" and gpu["gpu"]["site"] == fleet.site.name
    assert (gpu["t"], gpu["util"], gpu["power_w"], gpu["temp_max"]) == (
        [hour],
        [0.5],
        [250.0],
        [51],
    )


def test_every_level_answers_and_leads_down(staff, two_sites):
    fleet, _failed, far, other = two_sites
    site = fleet.site.name
    for url in (
        "/ops/fleet/",
        f"/ops/sites/{site}/",
        f"/ops/sites/{site}/pools/{A100}/",
        "/ops/nodes/node-1/",
        f"/ops/gpus/{fleet.gpus[0].uuid}/",
    ):
        page = staff.get(url)
        assert page.status_code == 200, url
        assert b'aria-current="page"' in page.content or url == "/ops/fleet/"
    assert staff.get("/ops/").url == "/ops/fleet/"
    node = staff.get("/ops/nodes/node-2/").content.decode()
    for up in (reverse("ops-site", args=[site]), reverse("ops-pool", args=[site, H100])):
        assert f'href="{up}"' in node
    assert staff.get(f"/ops/sites/{other.name}/pools/{A100}/").status_code == 404  # none there
    assert staff.get("/ops/sites/nowhere/").status_code == 404
    assert staff.get(f"/ops/gpus/{'0' * 8}/").status_code == 404
    bad = staff.get(f"/ops/sites/{site}/pools/{A100}/data.json?page=two")
    assert bad.status_code == 400 and "page='two'" in bad.json()["detail"]
    client = Client()
    for url in ("/ops/fleet/data.json", f"/ops/sites/{site}/", f"/ops/gpus/{far[0].uuid}/"):
        assert client.get(url).status_code == 302, url  # staff only


def test_a_pool_is_shown_a_page_of_nodes_at_a_time(staff, fleet, monkeypatch):
    monkeypatch.setattr(drill, "NODES_PER_PAGE", 2)
    for n in range(2, 6):
        _add_node(f"node-{n}", fleet.site, A100, fleet.node.pcr_policy)
    url = f"/ops/sites/{fleet.site.name}/pools/{A100}/data.json?range=24h"
    first, last = staff.get(url).json(), staff.get(url + "&page=9").json()
    assert (first["page"], first["pages"], first["node_count"]) == (1, 3, 5)
    assert [n["name"] for n in first["nodes"]] == ["node-1", "node-2"]
    assert last["page"] == 3 and [n["name"] for n in last["nodes"]] == ["node-5"]
    assert len(last["heat"]["labels"]) == 1


LONG_VIEWS = (
    "/ops/fleet/data.json?range=28d",
    "/ops/sites/{site}/data.json?range=28d",
    "/ops/sites/{site}/pools/" + A100 + "/data.json?range=28d",
    "/ops/nodes/node-1/data.json?range=28d",
    "/ops/gpus/{gpu}/data.json?range=28d",
    "/ops/utilisation/data.json?range=28d",
    "/ops/utilisation/data.json?range=7d",
)


def _queries(staff, fleet) -> dict[str, list[str]]:
    out = {}
    for view in LONG_VIEWS:
        url = view.format(site=fleet.site.name, gpu=fleet.gpus[0].uuid)
        with CaptureQueriesContext(connection) as seen:
            assert staff.get(url).status_code == 200, url
        out[view] = [q["sql"] for q in seen.captured_queries]
    return out


def test_the_28_day_views_read_rollups_only_in_queries_that_do_not_grow(staff, fleet, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    for n in (3, 6, 9):
        record_samples(_readings(fleet.gpus, _hour_ago(n * 24), 40, 20, 200_000))
    _queries(staff, fleet)  # the first read rolls the closed hours up (webapp/fleet/rollups.py)
    small = _queries(staff, fleet)
    for view, sql in small.items():
        assert not [q for q in sql if SAMPLES in q], view  # never a raw reading
    for n in range(2, 12):  # five times the GPUs, on more nodes, with their history
        gpus = _add_node(f"node-{n}", fleet.site, A100, fleet.node.pcr_policy)
        record_samples(_readings(gpus, _hour_ago(30), 40, 20, 200_000))
    large = _queries(staff, fleet)
    for view in LONG_VIEWS:
        assert len(large[view]) == len(small[view]), (view, small[view], large[view])
    fleet_sql = " ".join(large[LONG_VIEWS[0]])
    assert "fleet_poolhour" in fleet_sql
