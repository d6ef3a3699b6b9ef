"""Small plan inputs built by hand for the placement and CLI tests."""

from __future__ import annotations

from typing import Any

from scheduler.settlement import AttestedBatch, telemetry_digest
from scheduler.telemetry.sample import TelemetrySample


def gpu(
    gid: str,
    gen: str,
    node: str,
    site: str = "s1",
    free: bool = True,
    attested: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": gid,
        "generation": gen,
        "node": node,
        "site": site,
        "free": free,
        "attested": attested,
        **extra,
    }


def job(
    jid: str,
    gpus: int = 1,
    precision: str = "FP16",
    hours: Any = 10,
    priority: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": jid,
        "gpus": gpus,
        "precision": precision,
        "hours": hours,
        "priority": priority,
        **extra,
    }


def node(name: str, gen: str, count: int, site: str = "s1", **extra: Any) -> list[dict]:
    return [gpu(f"{name}-{i}", gen, name, site, **extra) for i in range(count)]


def plan_input(
    gpus: list[dict],
    jobs: list[dict],
    leases: list[dict] | None = None,
    sites: list[dict] | None = None,
) -> dict[str, Any]:
    return {
        "sites": sites or [{"id": "s1", "pue": "1.2"}, {"id": "s2", "pue": "1.5"}],
        "gpus": gpus,
        "jobs": jobs,
        "leases": leases or [],
    }


def attested(samples: list[TelemetrySample]) -> list[AttestedBatch]:
    """The samples as one attested batch per GPU (each bound by a quote of its node)."""
    out = []
    for gpu in sorted({s.gpu for s in samples}):
        mine = sorted((s for s in samples if s.gpu == gpu), key=lambda s: s.t_ms)
        out.append(AttestedBatch(gpu, telemetry_digest(mine), tuple(mine)))
    return out
