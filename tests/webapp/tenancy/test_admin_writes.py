"""The operator's forms for tenants, keys and members write through tenancy's actions: each
change leaves one audit row naming the field, the old and the new value. Staff without the
permission and a tenant's own login change nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.webapp.admin_forms import form_data, post_form, staff_client
from webapp.core.models import AuditEvent
from webapp.tenancy.models import ApiKey, Membership, Tenant

pytestmark = pytest.mark.django_db


def rows(action: str, obj) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, object_id=str(obj.pk)))


@pytest.fixture
def login(tenant):
    """A tenant's own console login (a member), not staff."""
    user = get_user_model().objects.create_user("alice", "", "a-long-test-password")
    membership = Membership.objects.create(user=user, tenant=tenant, role=Membership.MEMBER)
    client = Client()
    client.force_login(user)
    return client, membership


def test_priority_grant_change_is_audited(tenant):
    client, _ = staff_client("tenancy.change_tenant", "tenancy.view_tenant")
    url = f"/admin/tenancy/tenant/{tenant.pk}/change/"
    before = tenant.max_priority
    response = post_form(client, url, max_priority=str(before + 5))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Tenant.objects.get(pk=tenant.pk).max_priority == before + 5
    (row,) = rows("tenant.changed", tenant)
    assert row.actor == "operator"
    assert row.data["changes"] == {"max_priority": [before, before + 5]}


def test_saving_an_unchanged_tenant_writes_no_audit_row(tenant):
    client, _ = staff_client("tenancy.change_tenant", "tenancy.view_tenant")
    response = post_form(client, f"/admin/tenancy/tenant/{tenant.pk}/change/")
    assert response.status_code == 302
    assert not AuditEvent.objects.filter(action__startswith="tenant.").exists()


def test_role_change_on_the_tenant_page_inline_is_audited(tenant, login):
    _, membership = login
    client, _ = staff_client(
        "tenancy.change_tenant", "tenancy.view_tenant", "tenancy.change_membership"
    )
    url = f"/admin/tenancy/tenant/{tenant.pk}/change/"
    data = form_data(client, url)
    (role_field,) = [name for name, value in data.items() if name.endswith("-role")]
    response = post_form(client, url, **{role_field: Membership.OWNER})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Membership.objects.get(pk=membership.pk).role == Membership.OWNER
    (row,) = rows("membership.changed", membership)
    assert row.data["changes"] == {"role": [Membership.MEMBER, Membership.OWNER]}
    assert row.data["tenant"] == tenant.slug


def test_role_change_on_the_membership_page_is_audited(tenant, login):
    _, membership = login
    client, _ = staff_client("tenancy.change_membership", "tenancy.view_membership")
    url = f"/admin/tenancy/membership/{membership.pk}/change/"
    response = post_form(client, url, role=Membership.OWNER)
    assert response.status_code == 302, response.content.decode()[:2000]
    (row,) = rows("membership.changed", membership)
    assert row.data["changes"] == {"role": [Membership.MEMBER, Membership.OWNER]}


def test_removing_a_member_is_audited(tenant, login):
    _, membership = login
    client, _ = staff_client("tenancy.delete_membership", "tenancy.view_membership")
    url = f"/admin/tenancy/membership/{membership.pk}/delete/"
    response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    (row,) = rows("membership.deleted", membership)
    assert row.data["values"]["role"] == Membership.MEMBER


def test_key_scope_change_is_audited(tenant, member):
    key = ApiKey.objects.get(tenant=tenant, scope=ApiKey.READ)
    client, _ = staff_client("tenancy.change_apikey", "tenancy.view_apikey")
    url = f"/admin/tenancy/apikey/{key.pk}/change/"
    response = post_form(client, url, scope=ApiKey.WRITE)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ApiKey.objects.get(pk=key.pk).scope == ApiKey.WRITE
    (row,) = rows("api_key.changed", key)
    assert row.data["changes"] == {"scope": [ApiKey.READ, ApiKey.WRITE]}
    assert row.data["tenant"] == tenant.slug
    # the key now writes: the change took effect where it matters
    response = member.client.post("/api/v1/leases/", {}, format="json")
    assert response.status_code == 400  # validation, not 403 "read-only key"


def test_staff_without_the_permission_changes_nothing(tenant, member):
    key = ApiKey.objects.get(tenant=tenant, scope=ApiKey.READ)
    client, _ = staff_client("tenancy.view_apikey")
    url = f"/admin/tenancy/apikey/{key.pk}/change/"
    data = form_data(client, url)  # the read-only page shows no form fields to change
    data.update(scope=ApiKey.WRITE, _save="Save")
    response = client.post(url, data)
    assert response.status_code == 403
    assert ApiKey.objects.get(pk=key.pk).scope == ApiKey.READ
    assert not AuditEvent.objects.filter(action="api_key.changed").exists()


def test_a_tenants_own_login_cannot_use_the_admin(tenant, login):
    client, membership = login
    url = f"/admin/tenancy/membership/{membership.pk}/change/"
    response = client.post(url, {"user": membership.user_id, "tenant": tenant.pk, "role": "owner"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert Membership.objects.get(pk=membership.pk).role == Membership.MEMBER
    assert not AuditEvent.objects.filter(action__startswith="membership.").exists()
