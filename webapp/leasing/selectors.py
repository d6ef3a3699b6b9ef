"""Reads of leases that other apps share (the console's pages and the API ask the same
questions): a caller's leases and bill lines, restricted to what it may see
(webapp.tenancy.querysets)."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.leasing.models import Lease, Settlement
from webapp.tenancy.querysets import restrict_to_tenant


def tenant_leases(caller: object) -> QuerySet[Lease]:
    """The leases of the caller's tenant (an API key's principal or a console membership);
    none for anyone else."""
    return restrict_to_tenant(Lease.objects.all(), caller)


def tenant_lines(caller: object) -> QuerySet[Settlement]:
    """The bill lines of the caller's tenant (webapp.leasing.bills sums and months them)."""
    return restrict_to_tenant(Settlement.objects.all(), caller)
