from __future__ import annotations

import datetime as dt

from scheduler.advice import (
    HourTotals,
    PoolState,
    WindowTotals,
    advise_pools,
    advise_pools_from_totals,
    heatmap_from_hours,
    hour_totals,
    idle_heatmap,
    queueing_symptom,
    scaling_advice,
    window_totals,
)
from scheduler.telemetry.sample import TelemetrySample
from scheduler.telemetry.synthetic import synthetic_fleet, synthetic_trace

NOW = 10 * 3_600_000


def window(util: int, mem: int = 50, n: int = 10, gpu: str = "GPU-1"):
    return [TelemetrySample(gpu, NOW - i * 20_000, 0, 1, util, mem, 50) for i in range(n)]


def state(replicas=4, lo=1, hi=8, pending=3):
    return PoolState("pool-a", replicas, lo, hi, pending)


def test_busy_pool_with_pending_work_scales_up_by_two():
    advice = scaling_advice(state(), window(95, mem=30), NOW)
    assert (advice.action, advice.replicas_advised) == ("scale_up", 6)
    assert advice.mean_util == 0.95 and advice.mean_mem_util == 0.30
    assert "0.95 compute, 0.30 memory bandwidth" in advice.reason


def test_scale_up_stops_at_the_maximum():
    assert scaling_advice(state(replicas=7), window(95), NOW).replicas_advised == 8
    at_max = scaling_advice(state(replicas=8), window(95), NOW)
    assert at_max.action == "hold" and "at the maximum" in at_max.reason


def test_busy_pool_without_pending_work_holds():
    advice = scaling_advice(state(pending=0), window(95), NOW)
    assert advice.action == "hold" and "nothing is pending" in advice.reason


def test_idle_pool_scales_down_by_one_within_the_minimum():
    assert scaling_advice(state(), window(5), NOW).replicas_advised == 3
    at_min = scaling_advice(state(replicas=1), window(5), NOW)
    assert at_min.action == "hold" and "at the minimum" in at_min.reason


def test_only_the_last_five_minutes_count():
    old = [TelemetrySample("GPU-1", NOW - 600_000, 0, 1, 99, 9, 50)]
    advice = scaling_advice(state(), old + window(50), NOW)
    assert advice.samples == 10 and advice.action == "hold"
    assert scaling_advice(state(), old, NOW).reason.startswith("no telemetry")


def test_advice_from_a_stores_window_totals_is_the_advice_from_its_samples():
    old = [TelemetrySample("GPU-1", NOW - 600_000, 0, 1, 99, 9, 50)]
    states = [PoolState("b", 2, 1, 4, 0), PoolState("a", 2, 1, 4, 5), PoolState("c", 1, 1, 4, 0)]
    samples = {"a": old + window(90, mem=17, n=7), "b": window(3, n=30)}
    totals = {pool: window_totals(rows, NOW) for pool, rows in samples.items()}
    assert totals["a"] == WindowTotals(7, 7 * 90, 7 * 17)
    assert advise_pools_from_totals(states, totals) == advise_pools(states, samples, NOW)


def test_advise_pools_orders_by_pool():
    states = [PoolState("b", 2, 1, 4, 0), PoolState("a", 2, 1, 4, 5)]
    out = advise_pools(states, {"a": window(90), "b": window(3)}, NOW)
    assert [(a.pool, a.action) for a in out] == [("a", "scale_up"), ("b", "scale_down")]


def test_heatmap_buckets_by_weekday_and_hour():
    monday_3am = int(dt.datetime(2026, 11, 30, 3, 15, tzinfo=dt.UTC).timestamp() * 1000)
    samples = [TelemetrySample("GPU-1", monday_3am, 0, 1, u, 10, 40) for u in (0, 2, 80, 90)]
    heat = idle_heatmap(samples)
    cell = heat.cells[0 * 24 + 3]
    assert (cell.weekday, cell.hour, cell.samples, cell.idle_share) == (0, 3, 4, 0.5)
    assert heat.grid()[0][3] == 0.5 and heat.grid()[1][3] is None
    assert idle_heatmap(samples, utc_offset_h=2).grid()[0][5] == 0.5


def test_heatmap_of_the_synthetic_fleet_recovers_the_q2_profile():
    start = int(dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp() * 1000)
    samples = synthetic_trace(synthetic_fleet(150, seed=4), start, hours=24 * 7, step_s=900)
    grid = idle_heatmap(samples).grid()
    night = [grid[d][h] for d in range(7) for h in (2, 3, 4)]
    noon = [grid[d][h] for d in range(7) for h in (10, 11, 12)]
    assert abs(sum(night) / len(night) - 0.623) < 0.02
    assert abs(sum(noon) / len(noon) - 0.191) < 0.02


def test_hourly_totals_kept_in_pieces_draw_the_same_heatmap_as_the_samples():
    start = int(dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp() * 1000)
    samples = list(synthetic_trace(synthetic_fleet(6, seed=2), start, hours=48, step_s=600))
    first, second = hour_totals(samples[::2]), hour_totals(samples[1::2])
    merged = [
        HourTotals(
            key[1],
            *(
                getattr(first.get(key), f, 0) + getattr(second.get(key), f, 0)
                for f in ("samples", "idle", "util_sum", "mem_sum")
            ),
        )
        for key in first.keys() | second.keys()
    ]
    assert heatmap_from_hours(merged, utc_offset_h=3) == idle_heatmap(samples, utc_offset_h=3)
    assert sum(h.samples for h in merged) == len(samples)


def test_hour_totals_key_each_sample_by_gpu_and_utc_hour():
    t = int(dt.datetime(2026, 11, 30, 3, 59, 59, tzinfo=dt.UTC).timestamp() * 1000)
    totals = hour_totals(
        [
            TelemetrySample("GPU-1", t, 0, 1, 2, 10, 40),
            TelemetrySample("GPU-1", t + 1000, 0, 1, 90, 30, 40),
        ]
    )
    assert totals == {
        ("GPU-1", t - 3_599_000): HourTotals(t - 3_599_000, 1, 1, 2, 10),
        ("GPU-1", t + 1000): HourTotals(t + 1000, 1, 0, 90, 30),
    }


def test_high_compute_with_low_memory_bandwidth_is_flagged_as_queueing():
    assert queueing_symptom(0.9, 0.1) and queueing_symptom(0.7, 0.2)
    assert not queueing_symptom(0.9, 0.5)  # busy and moving data: working
    assert not queueing_symptom(0.5, 0.05)  # not busy enough to say
    assert not queueing_symptom(None, 0.1) and not queueing_symptom(0.9, None)
