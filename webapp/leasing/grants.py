"""A lease's grant on the cluster as tenants see it: who holds it, where, and how to run
work inside it; and the jobs that ran there, from the cluster's accounting."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.grants.interface import ClusterError, ClusterJob
from webapp.cluster import actions as cluster
from webapp.leasing.models import Lease

SUBMIT = "srun --jobid={handle} --overlap <command>"


# the lease's columns the view is made of (a values() query can read them: bench/bare_view.py)
FIELDS = ("cluster_user", "grants", "granted", "revoked")


def grant_view(lease: Lease) -> dict[str, Any]:
    return grant_document(**{name: getattr(lease, name) for name in FIELDS})


def grant_document(
    *, cluster_user: str, grants: list[dict[str, Any]], granted: datetime | None,
    revoked: datetime | None
) -> dict[str, Any]:  # fmt: skip
    return {
        "user": cluster_user,
        "granted": granted.isoformat() if granted else None,
        "revoked": revoked.isoformat() if revoked else None,
        "grants": [{"node": g["node"], "job_id": g["handle"], "gpus": g["gpus"]} for g in grants],
        "submit": [] if revoked else [SUBMIT.format(handle=g["handle"]) for g in grants],
    }


def lease_jobs(lease: Lease) -> list[ClusterJob]:
    """The steps run inside the lease's grants (every node, every grant it had). Raises
    ClusterError when the cluster cannot be asked."""
    backend = cluster.backend()
    handles = sorted({g["handle"] for g in lease.grants})
    if backend is None or not handles:
        return []
    return backend.jobs(handles)


__all__ = ["ClusterError", "grant_view", "lease_jobs"]
