"""What a tenant may ask for, as an operator set it on the tenant: the priority it may use
and its quotas of GPUs and queued requests. Checked by `actions.request_lease` inside its
transaction, with the tenant row locked so concurrent requests cannot both slip under."""

from __future__ import annotations

from django.db.models import Sum

from webapp.leasing import states
from webapp.leasing.models import Lease
from webapp.tenancy.models import Tenant

PRIORITY_REFUSED = "lease.priority"
QUOTA_REFUSED = "lease.quota"
HOLDS_OR_WAITS = states.HOLDS_GPUS | {states.REQUESTED}


class EntitlementRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_request(tenant: Tenant, *, gpu_count: int, priority: int) -> None:
    """Refuse a request above the tenant's granted priority or over its quotas. Call inside
    the transaction that creates the lease, after locking the tenant row."""
    if priority > tenant.max_priority:
        raise EntitlementRefused(
            PRIORITY_REFUSED,
            f"priority={priority} is above this tenant's entitlement ({tenant.max_priority}); "
            "priority above it is granted by an operator",
        )
    open_leases = Lease.objects.filter(tenant=tenant, state__in=HOLDS_OR_WAITS)
    queued = open_leases.filter(state=states.REQUESTED).count()
    if queued >= tenant.max_queued_requests:
        raise EntitlementRefused(
            QUOTA_REFUSED,
            f"{queued} requests are already waiting; this tenant's quota is "
            f"{tenant.max_queued_requests} (max_queued_requests)",
        )
    held = open_leases.aggregate(total=Sum("gpu_count"))["total"] or 0
    if held + gpu_count > tenant.max_gpus:
        raise EntitlementRefused(
            QUOTA_REFUSED,
            f"gpu_count={gpu_count} with {held} GPUs already held or requested exceeds this "
            f"tenant's quota of {tenant.max_gpus} (max_gpus)",
        )


def effective_priority(lease: Lease) -> int:
    """The priority the scheduler uses: what the lease asked for, never above what its
    tenant is entitled to now (an operator may have lowered the grant since)."""
    return min(lease.priority, lease.tenant.max_priority)
