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

from webapp.leasing import actions, scheduling, states
from webapp.leasing.models import Lease

log = logging.getLogger(__name__)

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class PassResult:
    placed: int
    preempted: int
    ended: int
    settled: int

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


def run_pass(*, actor: str, hour_s: float = SECONDS_PER_HOUR) -> PassResult:
    placed = preempted = 0
    # planning reads the whole fleet; with nothing requested there is nothing to place, and
    # preemption only ever makes room for a request (bench/fleet_bench.py: the worker's CPU
    # at 10,000 GPUs)
    if Lease.objects.filter(state=states.REQUESTED).exists():
        plan = scheduling.place_requested(actor=actor)
        placed, preempted = len(plan.placements), len(plan.preempted)
    ended = end_expired(actor=actor, hour_s=hour_s)
    settled = scheduling.settle_closed(actor=actor)
    return PassResult(
        placed=placed,
        preempted=preempted,
        ended=ended,
        settled=settled,
    )
