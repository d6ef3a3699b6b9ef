"""Writes to tenants, their API keys and their members: each one transaction and one audit
row (the admin's forms call these from save_model). The ledger records none of them."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from webapp.core.audited import Changes, delete_audited, save_audited
from webapp.core.events import audit
from webapp.tenancy.models import ApiKey, Membership, Tenant


def issue_api_key(
    tenant: Tenant,
    *,
    scope: str,
    name: str = "",
    expires: datetime | None = None,
    actor: str,
) -> tuple[ApiKey, str]:
    """A new key and its full token, which the caller shows once; only its digest stays."""
    with transaction.atomic():
        key, token = ApiKey.issue(tenant, scope=scope, name=name, expires=expires)
        audit(actor, "api_key.issued", key, tenant=tenant.slug, prefix=key.prefix, scope=scope)
    return key, token


def revoke_api_key(key: ApiKey, *, actor: str) -> ApiKey:
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        if not key.revoked:
            key.revoked = True
            key.save(update_fields=["revoked"])
            audit(actor, "api_key.revoked", key, tenant=key.tenant.slug, prefix=key.prefix)
    return key


KINDS = {Tenant: "tenant", ApiKey: "api_key", Membership: "membership"}  # audit row prefixes


def save_tenant(tenant: Tenant, *, actor: str) -> Changes:
    """A new tenant, or an edit of one: its name, quotas and priority grant (`max_priority`,
    which lets its leases preempt others and charges it the premium)."""
    return save_audited(tenant, actor=actor, kind="tenant")


def save_api_key(key: ApiKey, *, actor: str) -> Changes:
    """An edit of a key: its name, expiry or scope (read -> write lets it change leases).
    Keys are created only by `issue_api_key`, which shows the secret once."""
    if key._state.adding:
        raise ValueError("API keys are issued with issue_api_key, never saved new")
    return save_audited(key, actor=actor, kind="api_key", tenant=key.tenant.slug)


def save_membership(membership: Membership, *, actor: str) -> Changes:
    """A user joins a tenant, or a member's tenant or role changes."""
    return save_audited(membership, actor=actor, kind="membership", tenant=membership.tenant.slug)


def remove(obj: Tenant | ApiKey | Membership, *, actor: str) -> None:
    """An operator deletes a tenant (its keys and members with it), a key or a membership."""
    delete_audited(obj, actor=actor, kind=KINDS[type(obj)])
