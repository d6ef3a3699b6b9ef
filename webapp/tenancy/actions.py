"""Writes to tenants' API keys: each one transaction and one audit row. The ledger does
not record keys."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from webapp.core.events import audit
from webapp.tenancy.models import ApiKey, Tenant


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
