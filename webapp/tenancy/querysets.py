"""The one place where tenant API querysets are restricted to what the caller may see."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.tenancy.authentication import TenantPrincipal

# model label -> the lookup from that model to its tenant
TENANT_PATHS = {"leasing.lease": "tenant", "leasing.settlement": "lease__tenant"}


def restrict_to_tenant(queryset: QuerySet, principal: object) -> QuerySet:
    if not isinstance(principal, TenantPrincipal):
        return queryset.none()
    path = TENANT_PATHS[queryset.model._meta.label_lower]
    return queryset.filter(**{path: principal.tenant})
