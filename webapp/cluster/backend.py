"""The cluster backend in force, from settings (CLUSTER_BACKEND): the one place that picks
it. None when leases are granted nowhere (CLUSTER_BACKEND=none)."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from scheduler.grants.interface import GrantBackend
from scheduler.grants.slurm import SlurmBackend


@cache
def _configured(kind: str, conf: str, partition: str, bin_dir: str) -> GrantBackend | None:
    if kind == "slurm":
        return SlurmBackend(conf=conf or None, partition=partition, bin_dir=bin_dir or None)
    return None


def configured() -> GrantBackend | None:
    return _configured(
        settings.CLUSTER_BACKEND,
        settings.SLURM_CONF,
        settings.SLURM_PARTITION,
        settings.SLURM_BIN_DIR,
    )
