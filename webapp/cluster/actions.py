"""Every change Wattlease makes to the cluster goes through one of these: a grant of a
lease's GPUs, its revocation, a node drained or resumed by its attestation. Each is audited.
They take plain data (a lease's ledger id, its GPUs), so leasing calls them and this app
knows nothing of leases."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from scheduler.grants.interface import (
    ClusterError,
    GrantBackend,
    GrantRefused,
    NodeGate,
    requests_for,
)
from webapp.cluster import backend as backends
from webapp.cluster.slots import slots_of
from webapp.core.events import audit
from webapp.fleet.models import GPU, Node
from webapp.tenancy.models import Membership, Tenant

log = logging.getLogger(__name__)

# Drains Wattlease makes start with this, so a node an operator drained for another reason
# (maintenance) is never resumed by a good quote.
GATE_REASON_PREFIX = "attestation "
# The grant's time limit beyond the lease's hours: a backstop; the lease's end revokes it.
GRANT_LIMIT_MARGIN_S = 600


class ClusterUserRefused(Exception):
    """The lease names a cluster user that maps to no member of its tenant (or the tenant
    has none); nothing was granted. `code` names the rule."""

    def __init__(self, message: str, *, code: str = "cluster.user_unmapped") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Granted:
    """What the cluster granted: when the GPUs became usable, who holds them, and each
    node's grant ({node, handle, gpus})."""

    at: Any  # datetime
    user: str
    grants: list[dict[str, Any]]


def backend() -> GrantBackend | None:
    return backends.configured()


def cluster_user_for(
    tenant: Tenant, requested: str = "", *, member: Membership | None = None
) -> str:
    """Who holds a lease of `tenant` on the cluster: the cluster user asked for (one of the
    tenant's members'), else the asking member's own, else the tenant's first owner's."""
    mapped = Membership.objects.filter(tenant=tenant).exclude(cluster_user="")
    if requested:
        if not mapped.filter(cluster_user=requested).exists():
            raise ClusterUserRefused(
                f"cluster user {requested!r} maps to no member of tenant {tenant.slug}: an "
                "operator sets it on the member (admin → Tenants → members)"
            )
        return requested
    if member is not None and member.tenant_id == tenant.pk and member.cluster_user:
        return member.cluster_user
    owner = mapped.filter(role=Membership.OWNER).order_by("user_id").first()
    chosen = owner or mapped.order_by("user_id").first()
    if chosen is None:
        raise ClusterUserRefused(
            f"tenant {tenant.slug} has no cluster user: an operator sets one on a member "
            "(admin → Tenants → members) before its leases can be granted",
            code="cluster.no_user",
        )
    return chosen.cluster_user


@dataclass(frozen=True)
class LeaseGrant:
    """What one lease asks of the cluster: exactly `gpus`, held by `user`, for `hours_s`."""

    lease: str
    tenant: Tenant
    user: str
    gpus: Sequence[GPU]
    hours_s: float


def grant(
    lease: str, tenant: Tenant, user: str, gpus: Sequence[GPU], *, hours_s: float, actor: str
) -> Granted:
    """Hold exactly `gpus` for the lease on the cluster; raises GrantRefused (nothing is
    held, the lease is refused) or ClusterError (the cluster could not be asked: try again)."""
    [outcome] = grant_leases([LeaseGrant(lease, tenant, user, gpus, hours_s)], actor=actor)
    if isinstance(outcome, ClusterError):
        raise outcome
    return outcome


def grant_leases(asked: Sequence[LeaseGrant], *, actor: str) -> list[Granted | ClusterError]:
    """grant() of each lease, submitted together (one scheduling cycle of the cluster for
    all, not one each: bench/grant_bench.py); each lease gets all its GPUs or none, and its
    own outcome, audited."""
    cluster = backend()
    if cluster is None:
        raise ClusterError("no cluster is configured (CLUSTER_BACKEND=none)", code="cluster.none")
    accounts: dict[str, ClusterError | None] = {}
    for item in asked:
        account = item.tenant.cluster_account
        users = sorted({a.user for a in asked if a.tenant.cluster_account == account})
        if account not in accounts:
            try:
                cluster.ensure_account(account, users)
                accounts[account] = None
            except ClusterError as exc:
                accounts[account] = exc
    requests = {
        item.lease: requests_for(
            item.lease,
            account=item.tenant.cluster_account,
            user=item.user,
            gpus=slots_of(item.gpus),
            limit_s=int(item.hours_s) + GRANT_LIMIT_MARGIN_S,
        )
        for item in asked
        if accounts[item.tenant.cluster_account] is None
    }
    flat = [r for item in asked for r in requests.get(item.lease, [])]
    outcomes = iter(cluster.grant_many(flat) if flat else [])
    at = timezone.now()
    results: list[Granted | ClusterError] = []
    for item in asked:
        failed = accounts[item.tenant.cluster_account]
        held: list[dict[str, Any]] = []
        for request in requests.get(item.lease, []):
            outcome = next(outcomes)
            if isinstance(outcome, ClusterError):
                failed = failed or outcome
            else:
                held.append({"node": outcome.node, "handle": outcome.handle,
                             "gpus": [g.uuid for g in request.gpus]})  # fmt: skip
        if failed is not None:
            if held:  # all of the lease's GPUs or none
                _release_quietly(cluster, [g["handle"] for g in held])
            audit(actor, "cluster.grant_refused", item.tenant, lease=item.lease, user=item.user,
                  reason=str(failed), code=failed.code,
                  refused=isinstance(failed, GrantRefused))  # fmt: skip
            results.append(failed)
            continue
        audit(actor, "cluster.granted", item.tenant, lease=item.lease, user=item.user,
              grants=held, gpus=sorted(g.uuid for g in item.gpus))  # fmt: skip
        results.append(Granted(at=at, user=item.user, grants=held))
    return results


def _release_quietly(cluster: GrantBackend, handles: list[str]) -> None:
    try:
        cluster.release(handles)
    except ClusterError:
        log.exception("could not release grants %s; reconcile will", handles)


def release(tenant: Tenant, lease: str, handles: Sequence[str], *, actor: str) -> None:
    """Take these grants of the lease away (a migration's old GPUs)."""
    cluster = backend()
    if cluster is None or not handles:
        return
    cluster.release(list(handles))
    audit(actor, "cluster.released", tenant, lease=lease, handles=list(handles))


def revoke(tenant: Tenant, lease: str, *, actor: str) -> list[str]:
    """Take every grant of the lease away; its jobs stop within the backend's bound."""
    return revoke_many([(tenant, lease)], actor=actor)[lease]


def revoke_many(leases: list[tuple[Tenant, str]], *, actor: str) -> dict[str, list[str]]:
    """revoke() for each (tenant, lease) at once, as one lease-worker pass ends them:
    lease -> the handles revoked, one audit row each."""
    cluster = backend()
    if cluster is None:
        return {lease: [] for _, lease in leases}
    revoked = cluster.revoke_many([lease for _, lease in leases])
    for tenant, lease in leases:
        audit(actor, "cluster.revoked", tenant, lease=lease, handles=revoked[lease])
    return revoked


def gate_reason(node: Node) -> str | None:
    """Why `node` must take no new work (its attestation), or None when it may."""
    if node.trust == Node.TRUSTED:
        return None
    if node.trust == Node.FAILED:
        latest = node.attestations.order_by("-created", "-pk").first()
        reasons = latest.reasons if latest is not None else []
        detail = next(
            (r.get("detail") for r in reasons if isinstance(r, dict) and r.get("detail")),
            "the last quote was refused",
        )
        return f"{GATE_REASON_PREFIX}failed: {detail}"
    if node.trust == Node.STALE:
        return f"{GATE_REASON_PREFIX}stale: no good quote within the policy's age"
    return f"{GATE_REASON_PREFIX}pending: not attested yet"


def gate_nodes(*, actor: str) -> dict[str, int]:
    """Drain every node the cluster knows whose attestation failed, went stale or has not
    happened, with the reason; resume the ones Wattlease drained that attest again. A node
    drained for another reason (an operator's) is left as it is."""
    cluster = backend()
    if cluster is None:
        return {}
    gates = cluster.nodes()
    drained = resumed = 0
    for node in Node.objects.filter(name__in=list(gates)):
        gate = gates[node.name]
        reason = gate_reason(node)
        change = gate_change(reason, gate)
        if change == DRAIN:
            cluster.drain(node.name, reason or "")
            audit(actor, "node.drained", node, reason=reason)
            drained += 1
        elif change == RESUME:
            cluster.resume(node.name)
            audit(actor, "node.resumed", node, previous=gate.reason)
            resumed += 1
    return {"drained": drained, "resumed": resumed}


DRAIN, RESUME = "drain", "resume"


def gate_change(reason: str | None, gate: NodeGate) -> str | None:
    """What the gate must do to a node the cluster shows as `gate` when its attestation
    gives `reason` (gate_reason): DRAIN, RESUME or None. The one rule gate_nodes applies and
    the operator console flags as a disagreement until the next pass applies it."""
    if reason is not None and not gate.drained:
        return DRAIN
    if reason is None and gate.drained and gate.reason.startswith(GATE_REASON_PREFIX):
        return RESUME
    return None
