"""Every write to a lease goes through one of these functions: one transaction, one audit
row, the outbox rows the ledger needs, and dashboard events after commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger import money
from ledger.contract import bill_line
from ledger.units import ms_of
from scheduler.api import IntervalSettlement
from webapp.attestation.models import Attestation
from webapp.cluster import actions as cluster
from webapp.cluster.actions import Granted
from webapp.core.events import audit, publish_on_commit
from webapp.fleet.models import GPU
from webapp.leasing import entitlements, states
from webapp.leasing.models import Lease, Settlement
from webapp.outbox import records
from webapp.tenancy.models import Membership, Tenant

MAX_GPUS_PER_LEASE = 64
MAX_LEASE_HOURS = Decimal(24 * 366)


class LeaseError(Exception):
    """A lease action was refused; the message says why and `code` names the rule.
    Nothing was changed."""

    def __init__(self, message: str, *, code: str = "lease.refused") -> None:
        super().__init__(message)
        self.code = code


class GpuUnavailable(LeaseError):
    pass


def request_lease(
    tenant: Tenant,
    *,
    gpu_count: int,
    precision: str,
    hours: Decimal,
    priority: int = 0,
    single_node: bool = True,
    min_memory_gb: int = 0,
    cluster_user: str = "",
    member: Membership | None = None,
    actor: str,
) -> Lease:
    """A tenant asks for GPUs. Where a cluster grants leases, the lease is held there by
    `cluster_user` (one of the tenant's members'; else the asking member's own, else the
    tenant's first owner's): one that maps to no member is refused here, and audited."""
    if not 1 <= gpu_count <= MAX_GPUS_PER_LEASE:
        raise LeaseError(f"gpu_count={gpu_count} must be between 1 and {MAX_GPUS_PER_LEASE}")
    if not Decimal(0) < Decimal(hours) <= MAX_LEASE_HOURS:
        raise LeaseError(f"hours={hours} must be positive and at most {MAX_LEASE_HOURS}")
    if cluster.backend() is not None:
        try:
            cluster_user = cluster.cluster_user_for(tenant, cluster_user, member=member)
        except cluster.ClusterUserRefused as refused:
            audit(actor, "lease.refused", tenant, code=refused.code, reason=str(refused))
            raise LeaseError(str(refused), code=refused.code) from None
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        try:
            entitlements.check_request(tenant, gpu_count=gpu_count, priority=priority)
        except entitlements.EntitlementRefused as refused:
            raise LeaseError(str(refused), code=refused.code) from None
        lease = Lease.objects.create(
            tenant=tenant,
            gpu_count=gpu_count,
            precision=precision,
            hours=hours,
            priority=priority,
            single_node=single_node,
            min_memory_gb=min_memory_gb,
            cluster_user=cluster_user,
        )
        audit(
            actor,
            "lease.requested",
            lease,
            gpu_count=gpu_count,
            precision=precision,
            hours=str(hours),
            priority=priority,
        )
        publish_on_commit("lease", id=lease.pk, state=lease.state)
    return lease


def _transition(lease_id: int, target: str, actor: str, **changes: Any) -> Lease:
    """Lock the lease, check the state machine, apply `changes`; caller holds the atomic."""
    lease = Lease.objects.select_for_update().select_related("tenant").get(pk=lease_id)
    states.check(lease.pk, lease.state, target)
    previous = lease.state
    lease.state = target
    lease.state_changed = timezone.now()
    for field, value in changes.items():
        setattr(lease, field, value)
    lease.save()
    audit(
        actor,
        f"lease.{target}",
        lease,
        previous=previous,
        **{k: v for k, v in changes.items() if isinstance(v, (str, int))},
    )
    publish_on_commit("lease", id=lease.pk, state=target)
    return lease


def _claim_gpus(lease: Lease, gpus: Sequence[GPU]) -> None:
    """Lock `gpus` for this transaction and refuse any another lease holds; call inside
    the transaction that gives them to `lease`."""
    if len(gpus) != lease.gpu_count:
        raise LeaseError(f"lease {lease.pk} needs {lease.gpu_count} GPUs, got {len(gpus)}")
    ids = [g.pk for g in gpus]
    list(GPU.objects.select_for_update().filter(pk__in=ids))
    busy = GPU.objects.filter(pk__in=ids, leases__state__in=states.HOLDS_GPUS).exclude(
        leases__pk=lease.pk
    )
    taken = sorted(busy.values_list("uuid", flat=True).distinct())
    if taken:
        raise GpuUnavailable(f"GPUs already leased: {', '.join(taken)}")


def _grant_fields(granted: Granted | None) -> dict[str, Any]:
    if granted is None:
        return {}
    return {"cluster_user": granted.user, "grants": granted.grants, "granted": granted.at}


def place_lease(
    lease: Lease,
    gpus: Sequence[GPU],
    *,
    price: dict[str, Any],
    terms: dict[str, Any],
    attestations: Sequence[Attestation],
    actor: str,
    granted: Granted | None = None,
) -> Lease:
    """Put the lease on `gpus` at `terms` (the ledger's lease terms, which it re-checks),
    relying on `attestations` (the latest good quote of each node involved), which the
    ledger re-checks for freshness when it records the lease. `granted`: the cluster's grant
    of exactly these GPUs (the terms start when it was granted)."""
    with transaction.atomic():
        _claim_gpus(lease, gpus)
        lease = _transition(
            lease.pk,
            states.PLACED,
            actor,
            price=price,
            terms=terms,
            price_total_micro=money.Terms.of(terms).quote(),
            reason="",  # no longer waiting
            **_grant_fields(granted),
        )
        lease.gpus.set(gpus)
        lease.attestations.set(attestations)
        records.lease_created(lease, [a.pk for a in attestations])
    return lease


def activate_lease(lease: Lease, *, actor: str) -> Lease:
    now = timezone.now()
    with transaction.atomic():
        return _transition(lease.pk, states.ACTIVE, actor, started=now, interval_started=now)


def end_lease(lease: Lease, *, actor: str) -> Lease:
    with transaction.atomic():
        lease = _transition(lease.pk, states.ENDING, actor, ended=timezone.now())
        records.lease_ended(lease)
    return lease


def preempt_lease(lease: Lease, *, reason: str, actor: str) -> Lease:
    with transaction.atomic():
        lease = _transition(lease.pk, states.PREEMPTED, actor, reason=reason, ended=timezone.now())
        records.lease_ended(lease)
    return lease


def fail_lease(lease: Lease, *, reason: str, actor: str) -> Lease:
    with transaction.atomic():
        ran = lease.started is not None
        lease = _transition(lease.pk, states.FAILED, actor, reason=reason, ended=timezone.now())
        if ran:
            records.lease_ended(lease)
    return lease


def cancel_lease(lease: Lease, *, reason: str, actor: str) -> Lease:
    """Withdraw a lease that has not started. A placed one already has its contract on the
    way to the ledger, so the ledger is told it ended too (and frees its GPUs there)."""
    with transaction.atomic():
        placed = Lease.objects.filter(pk=lease.pk, state=states.PLACED).exists()
        lease = _transition(lease.pk, states.CANCELLED, actor, reason=reason)
        if placed:
            records.lease_ended(lease, cancelled_ms=ms_of(timezone.now()))
    return lease


def _record_settlement(lease: Lease, interval: IntervalSettlement) -> Settlement:
    """Store the scheduler's bill line as it is and queue it for the ledger."""
    seq = lease.settlements.count()  # intervals settled at earlier migrations come first
    if interval.seq != seq:
        raise LeaseError(f"lease {lease.pk}: line {interval.seq} is not the next ({seq})")
    settlement = Settlement.objects.create(
        lease=lease,
        seq=seq,
        generation=interval.generation,
        gpus=[g.gpu for g in interval.gpus],
        **bill_line.to_stored(interval.request()),
    )
    records.settlement_made(settlement)
    return settlement


def settle_lease(lease: Lease, intervals: Sequence[IntervalSettlement], *, actor: str) -> Lease:
    """Close the lease, settling what is left: the interval since it started or since its
    last migration (the lines before each move come first: settle_move)."""
    if not intervals:
        raise LeaseError(f"lease {lease.pk}: a settlement needs at least one interval")
    with transaction.atomic():
        lease = _transition(lease.pk, states.SETTLED, actor)
        if lease.unsettled_moves:
            raise LeaseError(f"lease {lease.pk}: the interval before a move is not settled yet")
        for interval in intervals:
            _record_settlement(lease, interval)
    return lease


def settle_move(lease: Lease, intervals: Sequence[IntervalSettlement], *, actor: str) -> Lease:
    """Settle the interval before the lease's oldest unsettled move, at the terms and on the
    GPUs it had then (scheduling.next_lines made `intervals` for it)."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if not lease.unsettled_moves:
            raise LeaseError(f"lease {lease.pk} has no move whose interval is unsettled")
        move = lease.unsettled_moves[0]
        if not intervals or intervals[-1].end_ms != move["until_ms"] or intervals[-1].final:
            raise LeaseError(
                f"lease {lease.pk}: the lines before a move end at the move "
                f"({move['until_ms']}) and are not final"
            )
        for interval in intervals:
            _record_settlement(lease, interval)
        lease.unsettled_moves = lease.unsettled_moves[1:]
        lease.save(update_fields=["unsettled_moves"])
        audit(actor, "lease.move_settled", lease, until_ms=move["until_ms"])
        publish_on_commit("lease", id=lease.pk, state=lease.state)
    return lease


def migrate_lease(
    lease: Lease,
    gpus: Sequence[GPU],
    *,
    price: dict[str, Any],
    terms: dict[str, Any],
    attestations: Sequence[Attestation],
    moved_at: datetime,
    actor: str,
    granted: Granted | None = None,
) -> Lease:
    """Move a running lease to GPUs of another generation: the rest of the lease runs (and is
    later settled) at the new terms; the interval before the move is settled later at the
    old ones (settle_move), once its old GPUs' readings up to the move are attested."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        states.check_migration(lease.pk, lease.state)
        held = list(lease.gpus.all())
        if {g.generation_id for g in gpus} & {h.generation_id for h in held}:
            raise LeaseError(f"lease {lease.pk} must move to another generation")
        _claim_gpus(lease, gpus)
        lease.unsettled_moves = [
            *lease.unsettled_moves,
            {
                "gpus": sorted(g.uuid for g in held),
                "terms": lease.terms,
                "until_ms": terms["start_ms"],  # the new terms begin where the old end
            },
        ]
        lease.gpus.set(gpus)
        lease.attestations.set(attestations)
        lease.price = price
        lease.terms = terms  # from the move on; the interval before it keeps the old terms
        lease.price_total_micro = (lease.price_total_micro or 0) + money.Terms.of(terms).quote()
        lease.interval_started = moved_at
        for field, value in _grant_fields(granted).items():
            setattr(lease, field, value)
        lease.save()
        audit(actor, "lease.migrated", lease, to=sorted(g.uuid for g in gpus))
        records.lease_migrated(lease, [a.pk for a in attestations])
        publish_on_commit("lease", id=lease.pk, state=lease.state)
    return lease


def note_revoked(lease: Lease, handles: Sequence[str], *, actor: str) -> bool:
    """The cluster confirmed the ended lease's grant gone (its jobs stopped). True if written."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.revoked is not None or lease.state in states.RUNNING:
            return False
        lease.revoked = timezone.now()
        lease.save(update_fields=["revoked"])
        audit(actor, "lease.revoked", lease, handles=list(handles))
        publish_on_commit("lease", id=lease.pk, state=lease.state)
    return True


def note_regranted(lease: Lease, granted: Granted, *, actor: str) -> Lease:
    """The cluster lost a running lease's grant on some nodes and granted it again there
    (reconcile): the lease's grants name the new ones; billing is unchanged (the lease held
    its GPUs throughout)."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        renewed = {g["node"] for g in granted.grants}
        lease.grants = [g for g in lease.grants if g["node"] not in renewed] + granted.grants
        lease.save(update_fields=["grants"])
        audit(actor, "lease.regranted", lease, grants=granted.grants)
    return lease


def note_waiting(lease: Lease, *, reason: str, actor: str) -> bool:
    """A requested lease the placement pass left out keeps the scheduler's reason. Written
    (and audited) only when the reason changed, so a queue that waits does not fill the
    audit log; a lease that left REQUESTED meanwhile is not touched. True if written."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.state != states.REQUESTED or lease.reason == reason:
            return False
        previous = lease.reason
        lease.reason = reason
        lease.save(update_fields=["reason"])
        audit(actor, "lease.waiting", lease, reason=reason, previous=previous)
    return True


def note_settlement_committed(
    lease_ledger_id: str, seq: int, *, tx_id: str, block: int, validation_code: str, actor: str
) -> Settlement | None:
    """The ledger committed a bill line: note its transaction, block and validation code."""
    with transaction.atomic():
        settlement = (
            Settlement.objects.select_for_update()
            .filter(lease__ledger_id=lease_ledger_id, seq=seq)
            .first()
        )
        if settlement is None:
            return None
        settlement.ledger_tx = tx_id
        settlement.ledger_block = block
        settlement.validation_code = validation_code
        settlement.save(update_fields=["ledger_tx", "ledger_block", "validation_code"])
        audit(actor, "settlement.committed", settlement, lease=lease_ledger_id, seq=seq, tx=tx_id)
    return settlement
