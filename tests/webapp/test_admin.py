"""The operator console: every model has its admin page, and the node actions work."""

from __future__ import annotations

import json
import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from webapp.attestation.actions import node_for_token
from webapp.core.models import AuditEvent
from webapp.fleet.models import Node
from webapp.outbox import records
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import ApiKey

WEBAPP_APPS = ("core", "tenancy", "fleet", "attestation", "leasing", "outbox")
INTERNAL = {"EnrolmentSession", "Nonce"}  # short-lived protocol state, not for operators
# readings: millions of rows a day keyed by (GPU, instant), which the admin cannot list;
# the dashboards and the hourly rollups' admin page show them
INTERNAL |= {"TelemetrySample"}
# the pool rollups' watermark (webapp/fleet/rollups.py): one row of bookkeeping
INTERNAL |= {"RolledUp"}


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("op", "", "a-long-test-password")
    client.force_login(user)
    return client


def test_every_domain_model_has_an_admin_page(operator, fleet):
    for label in WEBAPP_APPS:
        for model in apps.get_app_config(label).get_models():
            if model.__name__ in INTERNAL:
                continue
            assert admin.site.is_registered(model), model
            url = f"/admin/{label}/{model._meta.model_name}/"
            assert operator.get(url).status_code == 200, url


def test_operator_revokes_an_ak_from_the_console(operator, fleet):
    Node.objects.filter(pk=fleet.node.pk).update(ak_public=b"ak", ak_name="00ab")
    response = operator.post(
        "/admin/fleet/node/",
        {"action": "revoke_ak", "_selected_action": [fleet.node.pk]},
        follow=True,
    )
    assert response.status_code == 200
    node = Node.objects.get(pk=fleet.node.pk)
    assert node.status == Node.ENROLLING and not node.ak_public
    assert OutboxEntry.objects.filter(function="RevokeAK").exists()


def test_operator_issues_a_node_credential_shown_once(operator, fleet):
    response = operator.post(
        "/admin/fleet/node/",
        {"action": "issue_credential", "_selected_action": [fleet.node.pk]},
        follow=True,
    )
    page = response.content.decode()
    assert "WATTLEASE_NODE_CREDENTIAL=wn_" in page
    token = re.search(r"WATTLEASE_NODE_CREDENTIAL=(wn_[\w.-]+)", page).group(1)
    assert node_for_token(token) == Node.objects.get(pk=fleet.node.pk)
    assert_shown_once(response, token)


def assert_shown_once(response, secret: str) -> None:
    """On the page only: no messages cookie carries it, and nothing may cache the page."""
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    for cookie in response.cookies.values():
        assert secret not in cookie.value
        assert secret.split(".")[-1] not in cookie.value
    assert "messages" not in response.cookies


def test_operator_issues_an_api_key_shown_once_and_audited(operator, tenant):
    response = operator.post(
        "/admin/tenancy/tenant/", {"action": "issue_write_key", "_selected_action": [tenant.pk]}
    )
    token = re.search(r"<code>(wl_[\w.-]+)</code>", response.content.decode()).group(1)
    assert_shown_once(response, token)
    key = ApiKey.objects.get(tenant=tenant)
    assert key.scope == ApiKey.WRITE and token not in (key.digest, key.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/leases/").status_code == 200
    event = AuditEvent.objects.get(action="api_key.issued")
    assert (event.actor, event.object_id) == ("op", str(key.pk))
    assert token not in json.dumps(event.data)


def test_operator_revokes_an_api_key_and_it_is_audited(operator, owner):
    key = ApiKey.objects.get(tenant=owner.tenant)
    operator.post("/admin/tenancy/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert ApiKey.objects.get(pk=key.pk).revoked
    assert owner.client.get("/api/v1/leases/").status_code == 401
    assert AuditEvent.objects.filter(action="api_key.revoked", object_id=str(key.pk)).exists()


def test_quarantine_is_an_action_with_an_audit_row(operator, fleet):
    operator.post(
        "/admin/fleet/node/", {"action": "quarantine", "_selected_action": [fleet.node.pk]}
    )
    assert Node.objects.get(pk=fleet.node.pk).status == Node.QUARANTINED
    event = AuditEvent.objects.get(action="node.quarantined")
    assert event.data == {"previous": Node.ACTIVE}
    operator.post(
        "/admin/fleet/node/", {"action": "quarantine", "_selected_action": [fleet.node.pk]}
    )
    assert AuditEvent.objects.filter(action="node.quarantined").count() == 1  # once


SETTLE_UNKNOWN = {
    "lease_id": "00000000-0000-4000-8000-000000000000",
    "interval_seq": 0,
    "start_ms": 0,
    "end_ms": 60_000,
    "measured_mj": 1,
    "telemetry_digest": "00" * 32,
    "final": True,
    "tariff_micro_per_kwh": 1,
    "pue_milli": 1000,
    "capacity_micro_per_gpu_hour": 1,
    "capacity_micro": 0,
    "priced_energy_micro": 0,
    "measured_energy_micro": 0,
    "settlement_micro": 0,
    "total_micro": 0,
}


def test_dead_letters_are_listed_and_sent_again(operator, ledger):
    entry = records.enqueue("test:settle-unknown", "Settle", SETTLE_UNKNOWN)
    assert relay_once(ledger) == {"rejected": 1}  # the contract knows no such lease
    listed = operator.get("/admin/outbox/outboxentry/?dead=rejected").content.decode()
    assert "test:settle-unknown" in listed
    operator.post("/admin/outbox/outboxentry/", {"action": "retry", "_selected_action": [entry.pk]})
    assert OutboxEntry.objects.get(pk=entry.pk).status == OutboxEntry.PENDING
    assert AuditEvent.objects.filter(action="outbox.retried", object_id=str(entry.pk)).exists()
    assert relay_once(ledger) == {"rejected": 1}  # sent again (and refused again)


def test_a_refusal_the_domain_acted_on_is_not_retried(operator, db):
    entry = records.enqueue("test:create", "CreateLease", {"lease_id": "x"})
    OutboxEntry.objects.filter(pk=entry.pk).update(status=OutboxEntry.REJECTED)
    response = operator.post(
        "/admin/outbox/outboxentry/",
        {"action": "retry", "_selected_action": [entry.pk]},
        follow=True,
    )
    assert "already acted on" in response.content.decode()
    assert OutboxEntry.objects.get(pk=entry.pk).status == OutboxEntry.REJECTED


GOLDEN = {"sha256": {"0": "11" * 32, "2": "22" * 32, "7": "33" * 32}}


def _as_admin(org_index: int, *argv: str) -> tuple[int, dict]:
    """`wattlease policy ...` as one organisation's admin on the test's ledger."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from chaincode_client.policy_cli import main
    from webapp.demo.governance import admin_clients

    out = io.StringIO()
    with admin_clients() as admins, redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = main(list(argv), connect=lambda: admins[org_index])
    return code, json.loads(out.getvalue())


def test_a_pcr_policy_page_says_whether_the_ledger_enforces_this_copy(
    operator, fleet, ledger, tmp_path
):
    policy = fleet.node.pcr_policy
    policy.pcrs = GOLDEN
    policy.save()
    page = f"/admin/fleet/pcrpolicy/{policy.pk}/change/"
    assert "not approved: nodes with it cannot register" in operator.get(page).content.decode()

    download = operator.post(
        "/admin/fleet/pcrpolicy/",
        {"action": "download_ledger_document", "_selected_action": [policy.pk]},
    )
    assert download["Content-Disposition"] == 'attachment; filename="test-policy.json"'
    path = tmp_path / "test-policy.json"
    path.write_bytes(download.content)
    code, opened = _as_admin(0, "propose", "pcr_policy", str(path), "--key", "test-policy")
    assert code == 0
    assert opened["document_sha256"] in operator.get(page).content.decode()  # shown to review
    code, _ = _as_admin(1, "approve", opened["proposal_id"], "--sha256", opened["document_sha256"])
    assert code == 0
    assert "in force (version 1)" in operator.get(page).content.decode()

    policy.pcrs = {"sha256": {**GOLDEN["sha256"], "7": "44" * 32}}  # edited here only
    policy.save()
    assert "differs from version 1 in force" in operator.get(page).content.decode()
    assert "differs from version 1" in operator.get("/admin/fleet/pcrpolicy/").content.decode()


def test_a_proposal_holds_one_policy_document(operator, fleet, db):
    from webapp.fleet.models import PcrPolicy

    other = PcrPolicy.objects.create(name="other", pcrs=GOLDEN)
    response = operator.post(
        "/admin/fleet/pcrpolicy/",
        {
            "action": "download_ledger_document",
            "_selected_action": [fleet.node.pcr_policy.pk, other.pk],
        },
        follow=True,
    )
    assert "Content-Disposition" not in response
    assert "Select exactly one policy" in response.content.decode()
