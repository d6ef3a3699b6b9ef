"""Hourly per-GPU rollups kept as telemetry is stored: the same totals as the scheduler's
hour_totals over the stored samples, however the samples arrive (late, repeated, by the
worker), and the idle heat map read from them; the pool rollups the sums of their GPUs'."""

from __future__ import annotations

from django.core.management import call_command

from scheduler import api as scheduler
from scheduler.telemetry.synthetic import SyntheticGpu
from webapp.dashboard import capacity
from webapp.fleet import rollups
from webapp.fleet.models import GpuHour, PoolHour, TelemetrySample
from webapp.fleet.telemetry import record_samples
from webapp.leasing.retention import apply_retention

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


def _pool_sums_of_gpu_hours() -> dict[tuple[int, int, int], tuple[int, ...]]:
    out: dict[tuple[int, int, int], list[int]] = {}
    for row in GpuHour.objects.select_related("gpu__node"):
        key = (row.gpu.node.site_id, row.gpu.generation_id, row.hour_ms)
        acc = out.setdefault(key, [0, 0, 0, 0, 0, 0, 0])
        for i, v in enumerate(
            (1, row.samples, row.idle, row.util_sum, row.mem_sum, row.power_mw_sum)
        ):
            acc[i] += v
        acc[6] += row.power_mw_sum // row.samples
    return {k: tuple(v) for k, v in out.items()}


def _pool_rows() -> dict[tuple[int, int, int], tuple[int, ...]]:
    return {
        (p.site_id, p.generation_id, p.hour_ms): (
            p.gpus,
            p.samples,
            p.idle,
            p.util_sum,
            p.mem_sum,
            p.power_mw_sum,
            p.gpu_power_mw,
        )
        for p in PoolHour.objects.all()
    }


def test_pool_rollups_are_the_sums_of_their_gpus_hours_late_readings_included(fleet):
    samples = _trace(fleet, hours=6)
    first, late = [s for s in samples if s.gpu != fleet.gpus[3].uuid], samples
    record_samples(first)
    now_ms = MONDAY_MS + 8 * 3_600_000
    assert rollups.catch_up(now_ms) > 0
    assert rollups.rolled_up_through() == rollups.closed_before(now_ms)
    assert rollups.catch_up(now_ms) == 0  # nothing left to do: one look-up
    assert _pool_rows() == _pool_sums_of_gpu_hours()
    record_samples(late)  # GPU 3's readings arrive for hours already rolled up
    assert _pool_rows() == _pool_sums_of_gpu_hours()
    assert {p.gpus for p in PoolHour.objects.all()} == {4}


def test_open_hours_are_summed_when_read_and_never_from_raw_samples(fleet):
    samples = _trace(fleet, hours=2.5)
    record_samples(samples)
    now_ms = MONDAY_MS + 3 * 3_600_000 + 60_000  # 1 minute on: the hour that began at 2 h is open
    TelemetrySample.objects.all().delete()  # the rollups alone must answer
    rows = rollups.pool_hours(MONDAY_MS, now_ms, now_ms)
    assert sorted(r["hour_ms"] for r in rows) == [MONDAY_MS + h * 3_600_000 for h in range(3)]
    assert PoolHour.objects.count() == 2  # the closed hours; the open one is summed, not written
    assert sum(r["samples"] for r in rows) == len(samples)


def test_retention_removes_pool_rollups_with_the_gpu_rollups(fleet, settings):
    record_samples(_trace(fleet, hours=2))
    rollups.catch_up(MONDAY_MS + 4 * 3_600_000)
    settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 1
    apply_retention(MONDAY_MS + 3 * 86_400_000)
    assert not PoolHour.objects.exists() and not GpuHour.objects.exists()
