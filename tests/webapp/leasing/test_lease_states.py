"""The lease state machine: every allowed transition works through its action; every other
one raises a clear error and changes nothing (state, audit log, outbox)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler.api import settle
from tests.ledger.helpers import A100, lease_terms
from tests.webapp.helpers import line, place
from webapp.core.models import AuditEvent
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.outbox.models import OutboxEntry

ACTOR = "test"
# a line for a lease that never had terms: the state machine refuses before it is read
UNPLACED_LINE = settle(
    "never-placed", 0, lease_terms(["GPU-x"], generation=A100, start_ms=0), [], 0, 0
)


def do(target: str, lease: Lease, gpus) -> Lease:
    """Ask for `target` through the one action that leads there."""
    if target == states.PLACED:
        return place(lease, gpus[: lease.gpu_count], [])
    simple = {
        states.ACTIVE: lambda: actions.activate_lease(lease, actor=ACTOR),
        states.ENDING: lambda: actions.end_lease(lease, actor=ACTOR),
        states.PREEMPTED: lambda: actions.preempt_lease(lease, reason="priority", actor=ACTOR),
        states.FAILED: lambda: actions.fail_lease(lease, reason="node failed", actor=ACTOR),
        states.CANCELLED: lambda: actions.cancel_lease(lease, reason="changed mind", actor=ACTOR),
        states.SETTLED: lambda: actions.settle_lease(
            lease, [line(lease) if lease.terms else UNPLACED_LINE], actor=ACTOR
        ),
    }
    return simple[target]()


# the shortest path of allowed transitions from `requested` to each state
PATHS = {
    states.REQUESTED: [],
    states.PLACED: [states.PLACED],
    states.ACTIVE: [states.PLACED, states.ACTIVE],
    states.ENDING: [states.PLACED, states.ACTIVE, states.ENDING],
    states.SETTLED: [states.PLACED, states.ACTIVE, states.ENDING, states.SETTLED],
    states.CANCELLED: [states.CANCELLED],
    states.PREEMPTED: [states.PLACED, states.ACTIVE, states.PREEMPTED],
    states.FAILED: [states.PLACED, states.ACTIVE, states.FAILED],
}
ALL = [s for s, _ in states.CHOICES]
TARGETS = [s for s in ALL if s != states.REQUESTED]


def lease_in(state: str, tenant, gpus) -> Lease:
    lease = actions.request_lease(
        tenant, gpu_count=2, precision="FP16", hours=Decimal("1"), actor=ACTOR
    )
    for step in PATHS[state]:
        lease = do(step, lease, gpus)
    assert lease.state == state
    return lease


ALLOWED = [(s, t) for s in ALL for t in TARGETS if t in states.TRANSITIONS[s]]
FORBIDDEN = [(s, t) for s in ALL for t in TARGETS if t not in states.TRANSITIONS[s]]


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_allowed_transition_works(fleet, tenant, source, target):
    lease = lease_in(source, tenant, fleet.gpus)
    audits = AuditEvent.objects.count()
    result = do(target, lease, fleet.gpus)
    assert Lease.objects.get(pk=lease.pk).state == target == result.state
    assert AuditEvent.objects.count() == audits + 1
    assert AuditEvent.objects.first().action == f"lease.{target}"


@pytest.mark.parametrize(("source", "target"), FORBIDDEN)
def test_forbidden_transition_raises_and_changes_nothing(fleet, tenant, source, target):
    lease = lease_in(source, tenant, fleet.gpus)
    before = (AuditEvent.objects.count(), OutboxEntry.objects.count())
    with pytest.raises(states.IllegalTransition) as excinfo:
        do(target, lease, fleet.gpus)
    assert f"from {source!r} to {target!r}" in str(excinfo.value)
    assert Lease.objects.get(pk=lease.pk).state == source
    assert (AuditEvent.objects.count(), OutboxEntry.objects.count()) == before


def test_every_state_is_covered():
    assert set(PATHS) == set(ALL) == set(states.TRANSITIONS)
    assert len(ALLOWED) + len(FORBIDDEN) == len(ALL) * len(TARGETS)


def test_placing_on_a_leased_gpu_is_refused(fleet, tenant):
    first = lease_in(states.ACTIVE, tenant, fleet.gpus)
    second = actions.request_lease(
        tenant, gpu_count=2, precision="FP16", hours=Decimal("1"), actor=ACTOR
    )
    with pytest.raises(actions.GpuUnavailable, match=fleet.gpus[0].uuid):
        do(states.PLACED, second, fleet.gpus)
    assert Lease.objects.get(pk=second.pk).state == states.REQUESTED
    assert set(first.gpus.all()) == set(fleet.gpus[:2])


def test_settled_gpus_are_free_again(fleet, tenant):
    lease_in(states.SETTLED, tenant, fleet.gpus)
    again = lease_in(states.PLACED, tenant, fleet.gpus)
    assert again.gpus.count() == 2


def test_placement_writes_the_ledger_outbox_in_the_same_transaction(fleet, tenant):
    lease = lease_in(states.PLACED, tenant, fleet.gpus)
    entry = OutboxEntry.objects.get(business_key=f"lease:{lease.ledger_id}:create")
    assert entry.function == "CreateLease"
    assert entry.args["gpus"] == sorted(g.uuid for g in fleet.gpus[:2])


@pytest.mark.parametrize(
    ("field", "value"), [("gpu_count", 0), ("gpu_count", 65), ("hours", Decimal("0"))]
)
def test_request_rejects_bad_sizes(tenant, field, value):
    args = {"gpu_count": 1, "precision": "FP16", "hours": Decimal("1"), field: value}
    with pytest.raises(actions.LeaseError, match=field):
        actions.request_lease(tenant, actor=ACTOR, **args)
    assert not Lease.objects.exists()


@pytest.mark.parametrize("state", sorted(set(states.TRANSITIONS) - states.MIGRATES_FROM))
def test_only_an_active_lease_migrates(state):
    with pytest.raises(states.IllegalMigration, match=f"is {state}; only an active lease"):
        states.check_migration(1, state)
    states.check_migration(1, states.ACTIVE)


def test_the_state_sets_are_derived_from_the_table():
    assert {states.SETTLED, states.CANCELLED} == states.TERMINAL
    assert {states.REQUESTED, states.PLACED} == states.CANCELLABLE
    assert {states.ACTIVE} == states.ENDABLE
    assert {states.ENDING, states.PREEMPTED, states.FAILED} == states.AWAITING_SETTLEMENT
    assert states.RUNNING == states.PREEMPTIBLE == {states.PLACED, states.ACTIVE}
    assert {states.ENDING, states.SETTLED} == states.ENDED
    for state in states.CANCELLABLE:
        states.check(1, state, states.CANCELLED)  # each may really go there
