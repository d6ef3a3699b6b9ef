"""The lease state machine: which state may follow which. Only webapp.leasing.actions
changes a lease's state, and it asks this table first."""

from __future__ import annotations

REQUESTED = "requested"
PLACED = "placed"
ACTIVE = "active"
ENDING = "ending"
SETTLED = "settled"
CANCELLED = "cancelled"
PREEMPTED = "preempted"
FAILED = "failed"

CHOICES = [
    (REQUESTED, "requested"),
    (PLACED, "placed"),
    (ACTIVE, "active"),
    (ENDING, "ending"),
    (SETTLED, "settled"),
    (CANCELLED, "cancelled"),
    (PREEMPTED, "preempted"),
    (FAILED, "failed"),
]

# A lease that drew energy (active, preempted, failed while running) is always settled, so
# no energy is ever dropped from a bill; one that never ran ends cancelled or failed.
TRANSITIONS: dict[str, frozenset[str]] = {
    REQUESTED: frozenset({PLACED, CANCELLED, FAILED}),
    PLACED: frozenset({ACTIVE, CANCELLED, PREEMPTED, FAILED}),
    ACTIVE: frozenset({ENDING, PREEMPTED, FAILED}),
    ENDING: frozenset({SETTLED}),
    PREEMPTED: frozenset({SETTLED}),
    FAILED: frozenset({SETTLED}),
    SETTLED: frozenset(),
    CANCELLED: frozenset(),
}

HOLDS_GPUS = frozenset({PLACED, ACTIVE, ENDING})
# A migration moves a running lease to other GPUs and keeps its state.
MIGRATES_FROM = frozenset({ACTIVE})

# Every other set is derived from the table, never spelled out elsewhere.


def _leading_to(target: str) -> frozenset[str]:
    return frozenset(state for state, after in TRANSITIONS.items() if target in after)


def _reachable_from(state: str) -> frozenset[str]:
    seen = {state}
    while new := {t for s in seen for t in TRANSITIONS[s]} - seen:
        seen |= new
    return frozenset(seen)


TERMINAL = frozenset(state for state, after in TRANSITIONS.items() if not after)
CANCELLABLE = _leading_to(CANCELLED)  # requested, placed: never ran
ENDABLE = _leading_to(ENDING)  # active: the tenant may end it
# Stopped drawing energy, its settlement due: ending, preempted, failed
AWAITING_SETTLEMENT = frozenset(s for s, after in TRANSITIONS.items() if after == {SETTLED})
# Holding GPUs and not ending: placed or active (what preemption may take, and what the
# ledger must still show as running)
RUNNING = HOLDS_GPUS - AWAITING_SETTLEMENT
PREEMPTIBLE = RUNNING & _leading_to(PREEMPTED)
ENDED = _reachable_from(ENDING)  # ended by the tenant: ending, then settled


class IllegalTransition(Exception):
    """A state change the lease state machine does not allow; nothing was changed."""

    def __init__(self, lease_id: object, current: str, target: str) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (final state)"
        super().__init__(
            f"lease {lease_id} cannot go from {current!r} to {target!r}; "
            f"from {current!r} it may go to: {allowed}"
        )
        self.current = current
        self.target = target


def check(lease_id: object, current: str, target: str) -> None:
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(lease_id, current, target)


class IllegalMigration(IllegalTransition):
    """A migration of a lease that is not running; nothing was changed."""

    def __init__(self, lease_id: object, current: str) -> None:
        Exception.__init__(self, f"lease {lease_id} is {current}; only an active lease migrates")
        self.current = current
        self.target = current


def check_migration(lease_id: object, current: str) -> None:
    if current not in MIGRATES_FROM:
        raise IllegalMigration(lease_id, current)
