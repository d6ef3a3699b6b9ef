"""Hourly per-GPU rollups kept as telemetry is stored: the same totals as the scheduler's
hour_totals over the stored samples, however the samples arrive (late, repeated, by the
worker), and the idle heat map read from them."""

from __future__ import annotations

from django.core.management import call_command

from scheduler import api as scheduler
from scheduler.telemetry.synthetic import SyntheticGpu
from webapp.dashboard import capacity
from webapp.fleet.models import GpuHour
from webapp.fleet.telemetry import record_samples

MONDAY_MS = 1_764_547_200_000  # 2025-12-01 00:00 UTC, a Monday


def _trace(fleet, hours: float, step_s: int = 300):
    gpus = [SyntheticGpu(g.uuid, 400) for g in fleet.gpus]
    return list(scheduler.synthetic_trace(gpus, MONDAY_MS, hours, step_s=step_s, seed=3))


def _stored_hours() -> dict[tuple[str, int], scheduler.HourTotals]:
    return {
        (row.gpu.uuid, row.hour_ms): scheduler.HourTotals(
            row.hour_ms, row.samples, row.idle, row.util_sum, row.mem_sum
        )
        for row in GpuHour.objects.select_related("gpu")
    }


def test_rollups_equal_the_hour_totals_of_the_samples_whatever_the_batches(fleet):
    samples = _trace(fleet, hours=5)
    record_samples(samples[1::2])
    record_samples(samples[::2])  # the other half arrives late, into the same hours
    record_samples(samples[:40])  # and a batch is delivered twice
    assert _stored_hours() == scheduler.hour_totals(samples)
    power = {(r.gpu.uuid, r.hour_ms): r.power_mw_sum for r in GpuHour.objects.all()}
    first = (samples[0].gpu, samples[0].t_ms)
    assert power[first] == sum(
        s.power_mw for s in samples if s.gpu == first[0] and s.t_ms < MONDAY_MS + 3_600_000
    )


def test_the_worker_keeps_the_rollups(fleet, settings, tmp_path):
    settings.TELEMETRY_SOURCE = "replay"
    samples = _trace(fleet, hours=2, step_s=600)
    trace = tmp_path / "trace.csv"
    scheduler.write_trace(samples, trace)
    call_command("telemetry_worker", "--trace", str(trace), "--speed", "0")
    assert _stored_hours() == scheduler.hour_totals(samples)


def test_heatmap_is_drawn_from_the_rollups(fleet, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    samples = _trace(fleet, hours=26)
    record_samples(samples)
    now_ms = MONDAY_MS + 27 * 3_600_000
    heat = capacity.idle_heatmap(now_ms)
    assert heat["idle_share"] == scheduler.idle_heatmap(samples).grid()
    assert heat["idle_share"][0][3] is not None and heat["idle_share"][3][3] is None
    # rollups older than the window are left out
    assert capacity.idle_heatmap(now_ms + capacity.HEATMAP_WINDOW_MS)["idle_share"][0][3] is None
