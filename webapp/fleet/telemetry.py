"""Telemetry into and out of the database, in the scheduler's sample type.

Sources (NVML on GPU hosts, a replayed trace elsewhere) yield scheduler TelemetrySamples;
`record_samples` stores those of GPUs the fleet knows and reports the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from django.db.models import Count, F, Max, Q, Sum

from ledger.units import MS_PER_HOUR
from scheduler.advice import hour_start_ms
from scheduler.telemetry.sample import TelemetrySample as Sample
from scheduler.telemetry.synthetic import IDLE_UTIL_PCT
from webapp.core.events import publish_on_commit
from webapp.fleet import rollups
from webapp.fleet.models import GPU, GpuHour, Node, TelemetrySample
from webapp.fleet.partitions import ensure_days

BATCH = 2000
RECENT_WINDOW_MS = 60_000  # telemetry older than this says nothing about the GPU now
LIVE_EVENT_MAX_SAMPLES = 2_000  # a larger batch is announced by its count only


@dataclass(frozen=True)
class Recorded:
    stored: int
    unknown_gpus: frozenset[str]


class GpuRef(NamedTuple):
    """What storing and announcing a GPU's readings needs of its row."""

    id: int
    generation: str  # the catalogue's id, which the dashboards draw readings by


def gpu_refs(uuids: Iterable[str], node: Node | None = None) -> dict[str, GpuRef]:
    """{uuid: GpuRef} of the fleet's GPUs (`node`'s, if given) among `uuids`, in one query."""
    gpus = GPU.objects.filter(uuid__in=set(uuids))
    if node is not None:
        gpus = gpus.filter(node=node)
    rows = gpus.values_list("uuid", "id", "generation__catalogue_id")
    return {uuid: GpuRef(gpu_id, generation) for uuid, gpu_id, generation in rows}


def record_samples(samples: Iterable[Sample], gpus: Mapping[str, GpuRef] | None = None) -> Recorded:
    """Store the samples of GPUs the fleet knows (each (GPU, instant) once) and report the
    rest. `gpus`: the samples' GPUs, where the caller has already looked them up (gpu_refs)."""
    samples = list(samples)
    # the GPUs these samples name, not the fleet's: one quote's readings cost the same at
    # 40 GPUs and at 10,000
    refs = gpu_refs(s.gpu for s in samples) if gpus is None else gpus
    rows, unknown = [], set()
    for s in samples:
        ref = refs.get(s.gpu)
        if ref is None:
            unknown.add(s.gpu)
            continue
        rows.append(
            TelemetrySample(
                gpu_id=ref.id,
                t_ms=s.t_ms,
                energy_mj=s.energy_mj,
                power_mw=s.power_mw,
                util_gpu_pct=s.util_gpu_pct,
                util_mem_pct=s.util_mem_pct,
                temp_c=s.temp_c,
            )
        )
    ensure_days(row.t_ms for row in rows)
    TelemetrySample.objects.bulk_create(rows, batch_size=BATCH, ignore_conflicts=True)
    if rows:
        # the samples are committed: tell the dashboards first, then keep the rollups
        _publish(rows, {ref.id: (uuid, ref.generation) for uuid, ref in refs.items()})
        times = [row.t_ms for row in rows]
        touched = {row.gpu_id for row in rows}
        update_hours(touched, min(times), max(times))
        rollups.late_readings(touched, min(times))
    return Recorded(stored=len(rows), unknown_gpus=frozenset(unknown))


def _publish(rows: list[TelemetrySample], gpus: dict[int, tuple[str, str]]) -> None:
    """Tell open dashboards about the new readings, the readings themselves (with their
    GPU's generation, which the pages draw them by) when few enough to travel in one
    message (pages then draw them without asking). `gpus`: {id: (uuid, generation)}."""
    readings = None
    if len(rows) <= LIVE_EVENT_MAX_SAMPLES:
        readings = [
            [
                gpus[r.gpu_id][0],
                r.t_ms,
                r.util_gpu_pct,
                r.util_mem_pct,
                r.power_mw,
                gpus[r.gpu_id][1],
            ]
            for r in rows
        ]
    publish_on_commit("telemetry", count=len(rows), samples=readings)


def update_hours(gpu_ids: set[int], first_ms: int, last_ms: int) -> int:
    """Recompute the hourly rollups of these GPUs for every hour from first_ms to last_ms
    from the stored samples (so a late or repeated batch can never count twice)."""
    start, end = hour_start_ms(first_ms), hour_start_ms(last_ms) + MS_PER_HOUR
    totals = (
        TelemetrySample.objects.filter(gpu_id__in=gpu_ids, t_ms__gte=start, t_ms__lt=end)
        .annotate(hour=F("t_ms") - F("t_ms") % MS_PER_HOUR)
        .values("gpu_id", "hour")
        .annotate(
            n=Count("t_ms"),
            idle=Count("t_ms", filter=Q(util_gpu_pct__lt=IDLE_UTIL_PCT)),
            util=Sum("util_gpu_pct"),
            mem=Sum("util_mem_pct"),
            power=Sum("power_mw"),
            temp=Sum("temp_c"),
            hottest=Max("temp_c"),
        )
        .order_by()
    )
    rows = [
        GpuHour(
            gpu_id=t["gpu_id"],
            hour_ms=t["hour"],
            samples=t["n"],
            idle=t["idle"],
            util_sum=t["util"],
            mem_sum=t["mem"],
            power_mw_sum=t["power"],
            temp_sum=t["temp"],
            temp_max=t["hottest"],
        )
        for t in totals
    ]
    GpuHour.objects.bulk_create(
        rows,
        batch_size=BATCH,
        update_conflicts=True,
        unique_fields=["gpu", "hour_ms"],
        update_fields=[
            "samples",
            "idle",
            "util_sum",
            "mem_sum",
            "power_mw_sum",
            "temp_sum",
            "temp_max",
        ],
    )
    return len(rows)


def samples_between(gpus: Sequence[GPU], start_ms: int, end_ms: int) -> list[Sample]:
    """The stored samples of `gpus` in [start_ms, end_ms], as the scheduler's type."""
    rows = (
        TelemetrySample.objects.filter(gpu__in=gpus, t_ms__gte=start_ms, t_ms__lte=end_ms)
        .order_by("t_ms")
        .values_list(
            "gpu__uuid", "t_ms", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c"
        )
    )
    return [Sample(*row) for row in rows]


def latest_by_gpu(window_ms: int = RECENT_WINDOW_MS) -> dict[str, TelemetrySample]:
    """The newest sample of every GPU that reported within `window_ms` of the newest one."""
    newest = TelemetrySample.objects.aggregate(t=Max("t_ms"))["t"]
    if newest is None:
        return {}
    recent = TelemetrySample.objects.filter(t_ms__gte=newest - window_ms)
    wanted = {(r["gpu_id"], r["t"]) for r in recent.values("gpu_id").annotate(t=Max("t_ms"))}
    return {s.gpu.uuid: s for s in recent.select_related("gpu") if (s.gpu_id, s.t_ms) in wanted}
