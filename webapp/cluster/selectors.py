"""Each node's attestation beside what the cluster makes of it, for the operator console:
one `nodes()` call for every node a page shows, and a node where the two disagree flagged by
the gate's own rule (actions.gate_change), not a second copy of it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.grants.interface import ClusterError
from webapp.cluster import backend as backends
from webapp.cluster.actions import gate_change, gate_reason
from webapp.fleet.models import Node


@dataclass(frozen=True)
class SideBySide:
    """One node: its attestation (`trust`, and `attestation_reason` when it must take no
    work) and the cluster's state and reason; `pending` is the change the gate's next pass
    makes ("drain", "resume") while the two disagree; `in_cluster` False: the cluster has no
    such node."""

    node: str
    trust: str
    attestation_reason: str | None
    in_cluster: bool
    cluster_state: str = ""
    cluster_reason: str = ""
    drained: bool = False
    pending: str | None = None


@dataclass(frozen=True)
class ClusterView:
    """`configured` False: leases are granted nowhere (CLUSTER_BACKEND=none); `error` the
    reason the cluster could not be asked (then `nodes` holds the attestation side only)."""

    configured: bool
    error: str | None
    nodes: dict[str, SideBySide]


def side_by_side(nodes: Iterable[Node]) -> ClusterView:
    nodes = list(nodes)
    cluster = backends.configured()
    if cluster is None:
        return ClusterView(False, None, {n.name: _attestation_only(n) for n in nodes})
    try:
        gates = cluster.nodes()
    except ClusterError as exc:
        return ClusterView(True, str(exc), {n.name: _attestation_only(n) for n in nodes})
    shown = {}
    for node in nodes:
        gate = gates.get(node.name)
        if gate is None:
            shown[node.name] = _attestation_only(node)
            continue
        reason = gate_reason(node)
        shown[node.name] = SideBySide(
            node=node.name,
            trust=node.trust,
            attestation_reason=reason,
            in_cluster=True,
            cluster_state=gate.state,
            cluster_reason=gate.reason,
            drained=gate.drained,
            pending=gate_change(reason, gate),
        )
    return ClusterView(True, None, shown)


def _attestation_only(node: Node) -> SideBySide:
    return SideBySide(node.name, node.trust, gate_reason(node), in_cluster=False)
