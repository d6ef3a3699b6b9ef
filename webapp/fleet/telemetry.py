"""Telemetry into and out of the database, in the scheduler's sample type.

Sources (NVML on GPU hosts, a replayed trace elsewhere) yield scheduler TelemetrySamples;
`record_samples` stores those of GPUs the fleet knows and reports the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Max

from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.fleet.models import GPU, TelemetrySample

BATCH = 2000
RECENT_WINDOW_MS = 60_000  # telemetry older than this says nothing about the GPU now


@dataclass(frozen=True)
class Recorded:
    stored: int
    unknown_gpus: frozenset[str]


def record_samples(samples: Iterable[Sample]) -> Recorded:
    gpu_ids = dict(GPU.objects.values_list("uuid", "id"))
    rows, unknown = [], set()
    for s in samples:
        gpu_id = gpu_ids.get(s.gpu)
        if gpu_id is None:
            unknown.add(s.gpu)
            continue
        rows.append(
            TelemetrySample(
                gpu_id=gpu_id,
                t_ms=s.t_ms,
                energy_mj=s.energy_mj,
                power_mw=s.power_mw,
                util_gpu_pct=s.util_gpu_pct,
                util_mem_pct=s.util_mem_pct,
                temp_c=s.temp_c,
            )
        )
    TelemetrySample.objects.bulk_create(rows, batch_size=BATCH, ignore_conflicts=True)
    return Recorded(stored=len(rows), unknown_gpus=frozenset(unknown))


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
