"""The grant interface: what makes a lease the cluster's own access control.

A lease holds exactly some GPUs for a window. A backend turns that into whatever the
cluster's workload manager enforces (Slurm: an allocation job holding exactly those GPU
slots, scheduler/grants/slurm.py), takes it away again, gates nodes whose attestation
failed, and reports what the cluster holds so drift can be found. Leasing only ever talks
to this interface: a second backend (Kubernetes DRA claims pinned to device UUIDs) is a new
file, not a change to leasing (docs/operations.md, "Other clusters").

Everything a backend reads back from the cluster is untrusted input: it is parsed strictly
and an answer that does not parse is a ClusterError naming what was wrong, never a guess."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# How long a grant may take to hold its GPUs before it is refused (the cluster scheduler
# starts an allocation within a scheduling cycle; one that waits longer is waiting for GPUs
# something else holds).
GRANT_START_TIMEOUT_S = 10.0
# What revocation promises: the lease's running jobs are gone within this bound.
REVOKE_BOUND_S = 10.0
# Every command a backend runs against the cluster gives up after this long.
CLUSTER_COMMAND_TIMEOUT_S = 15.0


class ClusterError(Exception):
    """The cluster could not be asked, or answered something that does not parse; nothing
    was granted or revoked by this call. `code` names the rule."""

    def __init__(self, message: str, *, code: str = "cluster.unavailable") -> None:
        super().__init__(message)
        self.code = code


class GrantRefused(ClusterError):
    """The cluster refused the grant (the reason is the cluster's own); nothing is held."""

    def __init__(self, message: str, *, code: str = "cluster.refused") -> None:
        super().__init__(message, code=code)


@dataclass(frozen=True)
class GpuSlot:
    """One GPU as the cluster addresses it: on `node`, at device `index`, of `generation`."""

    uuid: str
    node: str
    index: int
    generation: str


@dataclass(frozen=True)
class GrantRequest:
    """What one lease asks of the cluster on one node: exactly these GPUs, for the tenant's
    `account`, held by cluster user `user`, for at most `limit_s` seconds (a backstop: the
    lease's end revokes it sooner)."""

    lease: str
    account: str
    user: str
    node: str
    gpus: tuple[GpuSlot, ...]
    limit_s: int

    def __post_init__(self) -> None:
        if not self.gpus:
            raise ValueError(f"lease {self.lease}: a grant needs at least one GPU")
        strays = sorted({g.node for g in self.gpus} - {self.node})
        if strays:
            raise ValueError(f"lease {self.lease}: GPUs on {strays} in a grant on {self.node}")
        if self.limit_s <= 0:
            raise ValueError(f"lease {self.lease}: limit_s={self.limit_s} must be positive")


def requests_for(
    lease: str, *, account: str, user: str, gpus: Sequence[GpuSlot], limit_s: int
) -> list[GrantRequest]:
    """The one builder of a lease's grants: one per node its GPUs are on, in node order."""
    nodes = sorted({g.node for g in gpus})
    return [
        GrantRequest(
            lease=lease,
            account=account,
            user=user,
            node=node,
            gpus=tuple(sorted((g for g in gpus if g.node == node), key=lambda g: g.index)),
            limit_s=limit_s,
        )
        for node in nodes
    ]


@dataclass(frozen=True)
class Grant:
    """A grant the cluster holds: `handle` is the cluster's own id (a Slurm job id); `slots`
    the GPU indexes it holds on `node`; `running` whether the GPUs are held now."""

    lease: str
    handle: str
    account: str
    user: str
    node: str
    slots: tuple[int, ...]
    running: bool
    state: str
    submitted: int = 0  # Unix seconds


@dataclass(frozen=True)
class NodeGate:
    """A node as the cluster sees it: `drained` (takes no new work) and the reason given."""

    node: str
    state: str
    drained: bool
    reason: str
    # its slurmd has registered with this slurmctld (after a controller restart a node
    # shows its saved state before it does, and a step started then waits for it)
    registered: bool = True


@dataclass(frozen=True)
class ClusterJob:
    """A job (or step) that ran inside a lease's grant, from the cluster's accounting."""

    job_id: str
    user: str
    account: str
    state: str
    start: int | None  # Unix seconds
    end: int | None
    gpus: int
    gpu_seconds: int


class GrantBackend(Protocol):
    name: str

    def ensure_account(self, account: str, users: Sequence[str]) -> None:
        """The tenant's account exists and these cluster users may run under it."""

    def grant(self, request: GrantRequest) -> Grant:
        """Hold exactly request.gpus for the lease, returning once they are held; raise
        GrantRefused (nothing held) when the cluster will not, ClusterError when it cannot
        be asked."""

    def grant_many(self, requests: Sequence[GrantRequest]) -> list[Grant | ClusterError]:
        """grant() of each request, each with its own outcome, faster than one by one."""

    def revoke(self, lease: str) -> list[str]:
        """Take every grant of the lease away and stop its jobs within REVOKE_BOUND_S;
        returns the handles revoked (none: it held nothing). Idempotent."""

    def revoke_many(self, leases: Sequence[str]) -> dict[str, list[str]]:
        """revoke() for each of `leases` at once (what one lease-worker pass ends): lease ->
        the handles revoked. Either all are gone within REVOKE_BOUND_S or ClusterError."""

    def release(self, handles: Sequence[str]) -> None:
        """Take these grants away (a migration's old GPUs), as revoke does."""

    def grants(self) -> list[Grant]:
        """Every grant the cluster holds for any lease."""

    def drain(self, node: str, reason: str) -> None:
        """No new work starts on `node`; running grants are left to the caller."""

    def resume(self, node: str) -> None:
        """`node` takes work again."""

    def nodes(self) -> dict[str, NodeGate]:
        """Every node of the cluster, by name."""

    def jobs(self, handles: Sequence[str]) -> list[ClusterJob]:
        """The jobs and steps that ran inside these grants, from accounting."""

    def submit_hint(self, grant: Grant) -> str:
        """How the grant's holder runs work inside it (a shell command line)."""
