"""The operator console: every model has its admin page, and the node actions work."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model

from webapp.fleet.models import Node
from webapp.outbox.models import OutboxEntry

WEBAPP_APPS = ("core", "tenancy", "fleet", "attestation", "leasing", "outbox")
INTERNAL = {"EnrolmentSession", "Nonce"}  # short-lived protocol state, not for operators


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
    assert "WATTLEASE_NODE_CREDENTIAL=wn_" in response.content.decode()
    assert Node.objects.get(pk=fleet.node.pk).credential_digest
