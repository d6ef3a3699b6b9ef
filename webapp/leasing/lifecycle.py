"""The lease lifecycle as production runs it (`manage.py lease_worker`), one pass at a time:
place and preempt what waits, end what ran its hours, settle what stopped drawing energy.
Activation is not here: a lease starts when the ledger commits its contract (the outbox
reaction in webapp/leasing/reactions.py).

Several workers may run passes at once: each step goes through a leasing action that
re-checks the lease's state under its row lock, settlement claims each lease with
SELECT … FOR UPDATE SKIP LOCKED, and a step another worker already took is skipped."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from scheduler.grants.interface import ClusterError
from webapp.cluster import actions as cluster
from webapp.leasing import actions, cluster_drift, scheduling, states
from webapp.leasing.models import Lease

log = logging.getLogger(__name__)

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class PassResult:
    placed: int
    preempted: int
    ended: int
    settled: int
    revoked: int = 0
    repaired: int = 0  # drift between the cluster and the leases, put right

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v}


def end_expired(*, actor: str, hour_s: float = SECONDS_PER_HOUR) -> int:
    """End every active lease that has run its hours (`hour_s` wall seconds per hour)."""
    now = timezone.now()
    ended = 0
    for lease in Lease.objects.filter(state=states.ACTIVE, started__isnull=False):
        if lease.started + timedelta(seconds=float(lease.hours) * hour_s) > now:
            continue
        try:
            actions.end_lease(lease, actor=actor)
            ended += 1
        except states.IllegalTransition:  # another worker or the tenant ended it first
            continue
    return ended


def revoke_ended(*, actor: str) -> int:
    """Take the cluster's grant away from every lease that stopped running (ended, cancelled,
    preempted, failed): its jobs stop within the backend's bound. A cluster that cannot be
    asked now is asked again next pass; nothing the tenant does keeps a grant alive."""
    due = list(
        Lease.objects.exclude(grants=[])
        .filter(revoked__isnull=True)
        .exclude(state__in=states.RUNNING)
        .select_related("tenant")
    )
    if not due:
        return 0
    try:
        ending = [(lease.tenant, str(lease.ledger_id)) for lease in due]
        handles = cluster.revoke_many(ending, actor=actor)
    except ClusterError:
        log.exception("could not revoke the grants of %d leases; next pass tries again", len(due))
        return 0
    return sum(
        actions.note_revoked(lease, handles[str(lease.ledger_id)], actor=actor) for lease in due
    )


def repair_cluster(*, actor: str) -> int:
    """Gate nodes by their attestation, revoke strays, restore lost grants (cluster_drift)."""
    try:
        found = cluster_drift.findings(repair=True, actor=actor)
    except ClusterError:
        log.exception("could not compare the cluster with the leases; next pass tries again")
        return 0
    for finding in found:
        (log.info if finding.repaired else log.warning)("cluster: %s", finding)
    return sum(f.repaired for f in found)


def run_pass(*, actor: str, hour_s: float = SECONDS_PER_HOUR) -> PassResult:
    # revocation first: a pass that then waits on grants never delays an end's
    revoked = revoke_ended(actor=actor) if cluster.backend() else 0
    repaired = repair_cluster(actor=actor) if cluster.backend() else 0
    placed = preempted = 0
    # planning reads the whole fleet; with nothing requested there is nothing to place, and
    # preemption only ever makes room for a request (bench/fleet_bench.py: the worker's CPU
    # at 10,000 GPUs)
    if Lease.objects.filter(state=states.REQUESTED).exists():
        plan = scheduling.place_requested(actor=actor)
        placed, preempted = len(plan.placements), len(plan.preempted)
    ended = end_expired(actor=actor, hour_s=hour_s)
    settled = scheduling.settle_closed(actor=actor)
    if ended or preempted:  # what ended in this pass loses its grant now, not next pass
        revoked += revoke_ended(actor=actor) if cluster.backend() else 0
    return PassResult(
        placed=placed,
        preempted=preempted,
        ended=ended,
        settled=settled,
        revoked=revoked,
        repaired=repaired,
    )
