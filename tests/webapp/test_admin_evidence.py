"""Evidence in the operator's console is read only: no admin form adds, edits or deletes an
audit row, a quote, a TPM event, an attested batch, a bill line or an hourly rollup; none
deletes a lease, a ledger row or a catalogue generation. Readings (which have no admin page)
and quotes are never taken along by a delete: a GPU or node that has them is protected, and
a node without them is deleted through fleet's action, with its audit row."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory

from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.attestation.models import Attestation
from webapp.core.models import AuditEvent
from webapp.fleet.models import GPU, Node, TelemetrySample
from webapp.fleet.telemetry import record_samples

pytestmark = pytest.mark.django_db

READ_ONLY = [
    "core.AuditEvent",
    "attestation.Attestation",
    "attestation.NodeEvent",
    "attestation.TelemetryBatch",
    "leasing.Settlement",
    "fleet.GpuHour",
    "fleet.PoolHour",
]
NOT_DELETED = [*READ_ONLY, "leasing.Lease", "outbox.OutboxEntry", "fleet.Generation"]


@pytest.fixture
def superuser():
    return get_user_model().objects.create_superuser("op", "", "a-long-test-password")


@pytest.fixture
def operator(superuser) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


def _request(user):
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


@pytest.mark.parametrize("label", READ_ONLY)
def test_no_admin_adds_or_edits_evidence(superuser, label):
    model_admin = admin.site._registry[apps.get_model(label)]
    request = _request(superuser)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)


@pytest.mark.parametrize("label", NOT_DELETED)
def test_no_admin_deletes_evidence_or_a_record_the_system_keeps(superuser, label):
    model_admin = admin.site._registry[apps.get_model(label)]
    request = _request(superuser)
    assert not model_admin.has_delete_permission(request)
    assert "delete_selected" not in model_admin.get_actions(request)


def test_a_quotes_delete_page_is_forbidden_and_the_quote_stays(operator, fleet):
    quote = Attestation.objects.create(
        node=fleet.node, nonce="n1", valid=True, quote=b"q", signature=b"s"
    )
    response = operator.post(f"/admin/attestation/attestation/{quote.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert Attestation.objects.filter(pk=quote.pk).exists()


def test_a_gpu_with_readings_cannot_be_deleted_and_its_readings_stay(operator, fleet):
    gpu = fleet.gpus[0]
    record_samples([Sample(gpu.uuid, 1_000, 5_000, 300_000, 90, 60, 70)])
    response = operator.post(f"/admin/fleet/gpu/{gpu.pk}/delete/", {"post": "yes"})
    assert response.status_code == 200 and response.context["protected"]  # "cannot delete"
    assert GPU.objects.filter(pk=gpu.pk).exists()
    assert TelemetrySample.objects.filter(gpu=gpu).count() == 1
    assert not AuditEvent.objects.filter(action="gpu.deleted").exists()


def test_a_node_with_quotes_cannot_be_deleted(operator, fleet):
    Attestation.objects.create(node=fleet.node, nonce="n1", valid=True, quote=b"q", signature=b"s")
    response = operator.post(f"/admin/fleet/node/{fleet.node.pk}/delete/", {"post": "yes"})
    assert response.status_code == 200 and response.context["protected"]  # "cannot delete"
    assert Node.objects.filter(pk=fleet.node.pk).exists()
    assert Attestation.objects.filter(node=fleet.node).count() == 1
    assert not AuditEvent.objects.filter(action="node.deleted").exists()


def test_a_node_without_evidence_is_deleted_through_the_action_with_an_audit_row(operator, fleet):
    response = operator.post(f"/admin/fleet/node/{fleet.node.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Node.objects.filter(pk=fleet.node.pk).exists()
    (row,) = AuditEvent.objects.filter(action="node.deleted", object_id=str(fleet.node.pk))
    assert row.actor == "op" and row.data["values"]["name"] == fleet.node.name
