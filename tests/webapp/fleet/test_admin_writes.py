"""The operator's forms for sites, PCR policies and nodes write through fleet's actions: each
change leaves one audit row naming the field, the old and the new value; a refused edit
writes nothing."""

from __future__ import annotations

import json

import pytest

from tests.webapp.admin_forms import post_form, staff_client
from webapp.core.models import AuditEvent
from webapp.demo.seed import SITES
from webapp.fleet.models import Node, PcrPolicy, Site

pytestmark = pytest.mark.django_db

SHA256_ZERO = "00" * 32


def rows(action: str, obj) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, object_id=str(obj.pk)))


def test_site_rename_is_audited_and_warns_off_the_rate_card(fleet):
    client, _ = staff_client("fleet.change_site", "fleet.view_site")
    old = fleet.site.name
    response = post_form(client, f"/admin/fleet/site/{fleet.site.pk}/change/", name="Elsewhere")
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Site.objects.get(pk=fleet.site.pk).name == "Elsewhere"
    (row,) = rows("site.changed", fleet.site)
    assert row.data["changes"] == {"name": [old, "Elsewhere"]}
    assert row.data["on_rate_card"] is False
    page = client.get(response["Location"]).content.decode()
    assert "prices no site named" in page


def test_a_new_site_on_the_rate_card_is_audited(db):
    client, _ = staff_client("fleet.add_site", "fleet.view_site")
    response = post_form(client, "/admin/fleet/site/add/", name=SITES[1])
    assert response.status_code == 302, response.content.decode()[:2000]
    site = Site.objects.get(name=SITES[1])
    (row,) = rows("site.created", site)
    assert row.data["on_rate_card"] is True and row.data["values"]["name"] == SITES[1]


def test_pcr_policy_change_is_audited(fleet):
    policy = fleet.node.pcr_policy
    client, _ = staff_client("fleet.change_pcrpolicy", "fleet.view_pcrpolicy")
    golden = {"sha256": {"0": SHA256_ZERO, "2": None, "7": None}}
    url = f"/admin/fleet/pcrpolicy/{policy.pk}/change/"
    response = post_form(client, url, pcrs=json.dumps(golden), max_age_s="600")
    assert response.status_code == 302, response.content.decode()[:2000]
    (row,) = rows("pcr_policy.changed", policy)
    assert row.data["changes"]["pcrs"][1] == golden
    assert row.data["changes"]["max_age_s"] == [None, 600]
    assert PcrPolicy.objects.get(pk=policy.pk).pcrs == golden


def test_a_refused_pcr_policy_edit_writes_nothing(fleet):
    policy = fleet.node.pcr_policy
    client, _ = staff_client("fleet.change_pcrpolicy", "fleet.view_pcrpolicy")
    url = f"/admin/fleet/pcrpolicy/{policy.pk}/change/"
    response = post_form(client, url, pcrs=json.dumps({"sha256": {"0": "zz"}}))
    assert response.status_code == 200  # the form again, with the error
    assert "pcrs" in response.context["adminform"].form.errors
    assert not AuditEvent.objects.filter(action__startswith="pcr_policy.").exists()


def test_node_taken_out_of_quarantine_is_audited(fleet):
    Node.objects.filter(pk=fleet.node.pk).update(status=Node.QUARANTINED)
    client, _ = staff_client("fleet.change_node", "fleet.view_node", "fleet.change_gpu")
    url = f"/admin/fleet/node/{fleet.node.pk}/change/"
    response = post_form(client, url, status=Node.ACTIVE)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Node.objects.get(pk=fleet.node.pk).status == Node.ACTIVE
    (row,) = rows("node.changed", fleet.node)
    assert row.actor == "operator"
    assert row.data["changes"] == {"status": [Node.QUARANTINED, Node.ACTIVE]}
    assert not AuditEvent.objects.filter(action__startswith="gpu.").exists()  # GPUs unchanged


def test_staff_without_the_permission_cannot_release_a_node(fleet):
    Node.objects.filter(pk=fleet.node.pk).update(status=Node.QUARANTINED)
    client, _ = staff_client("fleet.view_node")
    url = f"/admin/fleet/node/{fleet.node.pk}/change/"
    response = client.post(url, {"status": Node.ACTIVE, "_save": "Save"})
    assert response.status_code == 403
    assert Node.objects.get(pk=fleet.node.pk).status == Node.QUARANTINED
    assert not AuditEvent.objects.filter(action__startswith="node.").exists()
