"""The one place where tenant querysets are restricted to what the caller may see: an API
key's principal or a console login's membership."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.tenancy.authentication import TenantPrincipal
from webapp.tenancy.models import Membership

# model label -> the lookup from that model to its tenant
TENANT_PATHS = {
    "leasing.lease": "tenant",
    "leasing.settlement": "lease__tenant",
    "fleet.gpu": "leases__tenant",
}


def restrict_to_tenant(queryset: QuerySet, principal: object) -> QuerySet:
    if not isinstance(principal, TenantPrincipal | Membership):
        return queryset.none()
    path = TENANT_PATHS[queryset.model._meta.label_lower]
    return queryset.filter(**{path: principal.tenant})
