"""The cluster against the leases (`manage.py reconcile`, and the lease worker's passes):
a grant without a running lease is revoked, a running lease whose grant is gone is granted
again on its own GPUs, a node whose gate disagrees with its attestation is drained or
resumed. Each finding says what was found and whether it was repaired; what cannot be
repaired safely (a lease that was never granted, a grant on other GPUs than the lease's) is
reported for the operator."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from scheduler.grants.interface import ClusterError, Grant
from webapp.cluster import actions as cluster
from webapp.fleet.models import Node
from webapp.leasing import actions, states
from webapp.leasing.models import Lease

log = logging.getLogger(__name__)

# A grant whose lease is not running yet may be one a placement pass is about to record
# (granted, not yet committed): left alone this long after its submission.
IN_FLIGHT_GRACE_S = 120


@dataclass(frozen=True)
class Finding:
    text: str
    repaired: bool

    def __str__(self) -> str:
        return f"{'repaired' if self.repaired else 'drift'}: {self.text}"


def findings(*, repair: bool, actor: str) -> list[Finding]:
    backend = cluster.backend()
    if backend is None:
        return []
    held: dict[str, list[Grant]] = defaultdict(list)
    for grant in backend.grants():
        held[grant.lease].append(grant)
    leases = {
        str(lease.ledger_id): lease
        for lease in Lease.objects.filter(ledger_id__in=list(held)).select_related("tenant")
    }
    found: list[Finding] = []
    for lease_id, grants in held.items():
        found += _stray(lease_id, grants, leases.get(lease_id), repair=repair, actor=actor)
    running = Lease.objects.filter(state__in=states.RUNNING).select_related("tenant")
    for lease in running.prefetch_related("gpus__node", "gpus__generation"):
        found += _missing(lease, held.get(str(lease.ledger_id), []), repair=repair, actor=actor)
    found += _gates(repair=repair, actor=actor)
    return found


def _stray(
    lease_id: str, grants: list[Grant], lease: Lease | None, *, repair: bool, actor: str
) -> list[Finding]:
    if lease is not None and lease.state in states.RUNNING:
        return []
    if (lease is None or lease.state == states.REQUESTED) and all(
        time.time() - g.submitted < IN_FLIGHT_GRACE_S for g in grants
    ):
        return []  # a placement pass may be recording it now
    handles = [g.handle for g in grants]
    why = "no such lease" if lease is None else f"the lease is {lease.state}"
    text = f"grant {', '.join(handles)} for lease {lease_id} held on the cluster: {why}"
    if not repair:
        return [Finding(text, False)]
    try:
        backend = cluster.backend()
        assert backend is not None
        backend.release(handles)
    except ClusterError as exc:
        return [Finding(f"{text}; could not revoke it: {exc}", False)]
    if lease is not None and lease.grants and lease.revoked is None:
        actions.note_revoked(lease, handles, actor=actor)
    return [Finding(f"{text}; revoked", True)]


def _missing(lease: Lease, grants: list[Grant], *, repair: bool, actor: str) -> list[Finding]:
    name = f"lease {lease.pk} ({lease.ledger_id})"
    if not lease.grants:
        return [Finding(f"{name}: {lease.state} but never granted on the cluster", False)]
    by_node = {g["node"]: g for g in lease.grants}
    expected = {
        node: sorted(gpu.index for gpu in lease.gpus.all() if gpu.node.name == node)
        for node in by_node
    }
    live = {g.node: g for g in grants}
    wrong = [n for n, g in live.items() if n in expected and list(g.slots) != expected[n]]
    if wrong:
        return [Finding(f"{name}: the cluster holds other GPUs than the lease's on {wrong}", False)]
    lost = sorted(set(expected) - set(live))
    if not lost:
        return []
    text = f"{name}: {lease.state}, but its grant on {', '.join(lost)} is gone from the cluster"
    if not repair:
        return [Finding(text, False)]
    gpus = [gpu for gpu in lease.gpus.all() if gpu.node.name in lost]
    left_s = float(lease.hours) * settings.LEASE_HOUR_S
    if lease.started is not None:
        left_s = max(60.0, left_s - (timezone.now() - lease.started).total_seconds())
    try:
        granted = cluster.grant(
            str(lease.ledger_id),
            lease.tenant,
            lease.cluster_user,
            gpus,
            hours_s=left_s,
            actor=actor,
        )
    except ClusterError as exc:
        return [Finding(f"{text}; could not grant it again: {exc}", False)]
    actions.note_regranted(lease, granted, actor=actor)
    return [Finding(f"{text}; granted again", True)]


def _gates(*, repair: bool, actor: str) -> list[Finding]:
    backend = cluster.backend()
    assert backend is not None
    gates = backend.nodes()
    out = []
    for node in Node.objects.filter(name__in=list(gates)):
        gate, reason = gates[node.name], cluster.gate_reason(node)
        if reason is not None and not gate.drained:
            out.append(f"node {node.name}: takes work on the cluster, but {reason}")
        elif reason is None and gate.drained and gate.reason.startswith(cluster.GATE_REASON_PREFIX):
            out.append(f"node {node.name}: attests, but is drained ({gate.reason})")
    if out and repair:
        cluster.gate_nodes(actor=actor)
    return [Finding(text, repair) for text in out]
