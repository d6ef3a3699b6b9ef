"""Operator-facing advice: elastic scaling per pool and idle capacity by hour and weekday.

Scaling follows the seed's rule (chapter 2.1): take the mean compute utilisation over the
last 5 minutes; above 0.85 with pending work, add 2 replicas (up to the pool's maximum);
below 0.15, remove 1 (down to its minimum). The window keeps one noisy sample from
triggering a change. This is advice, not an autoscaler: it says what and why, and the
operator (or a later controller) acts. Memory-bandwidth utilisation is reported beside
compute utilisation in every recommendation, because utilisation alone is not throughput.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ledger.units import MS_PER_DAY, MS_PER_HOUR
from scheduler.telemetry.sample import TelemetrySample
from scheduler.telemetry.synthetic import IDLE_UTIL_PCT

SCALE_WINDOW_MS = 5 * 60 * 1000
SCALE_UP_UTIL = 0.85
SCALE_DOWN_UTIL = 0.15
SCALE_UP_STEP = 2
SCALE_DOWN_STEP = 1
# The seed's chapter 1: a GPU busy computing while its memory bandwidth idles is a queueing
# symptom (kernels wait on launches, host transfers or each other), not a full GPU.
QUEUEING_COMPUTE_MIN = 0.70
QUEUEING_MEM_BW_MAX = 0.20
EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class PoolState:
    pool: str
    replicas: int
    min_replicas: int
    max_replicas: int
    pending_jobs: int


@dataclass(frozen=True)
class ScalingAdvice:
    pool: str
    action: str  # "scale_up" | "scale_down" | "hold"
    replicas_now: int
    replicas_advised: int
    mean_util: float | None  # compute, 0-1, over the window
    mean_mem_util: float | None  # memory bandwidth, 0-1, over the window
    samples: int
    reason: str


@dataclass(frozen=True)
class WindowTotals:
    """A pool's samples in the scaling window, summed: all the rule reads of them (a store
    can sum them where they are kept instead of handing over every sample)."""

    samples: int
    util_sum: int  # sum of util_gpu_pct
    mem_sum: int  # sum of util_mem_pct


def window_totals(samples: Iterable[TelemetrySample], now_ms: int) -> WindowTotals:
    """The samples in (now_ms - SCALE_WINDOW_MS, now_ms], summed (older ones are ignored)."""
    window = [s for s in samples if now_ms - SCALE_WINDOW_MS < s.t_ms <= now_ms]
    return WindowTotals(
        len(window), sum(s.util_gpu_pct for s in window), sum(s.util_mem_pct for s in window)
    )


def scaling_advice(
    state: PoolState, samples: Iterable[TelemetrySample], now_ms: int
) -> ScalingAdvice:
    """The seed's rule for one pool, from its GPUs' samples (older ones are ignored)."""
    return advice_from_totals(state, window_totals(samples, now_ms))


def advice_from_totals(state: PoolState, totals: WindowTotals) -> ScalingAdvice:
    """The seed's rule for one pool, from its samples in the window, summed."""
    if not totals.samples:
        return ScalingAdvice(
            state.pool,
            "hold",
            state.replicas,
            state.replicas,
            None,
            None,
            0,
            "no telemetry in the last 5 minutes: no advice",
        )
    util = totals.util_sum / totals.samples / 100
    mem = totals.mem_sum / totals.samples / 100
    seen = (
        f"5-minute mean utilisation {util:.2f} compute, {mem:.2f} memory bandwidth "
        f"({totals.samples} samples); {state.pending_jobs} job(s) pending"
    )
    action, target, why = "hold", state.replicas, "within the 0.15-0.85 band"
    if util > SCALE_UP_UTIL and state.pending_jobs > 0:
        if state.replicas < state.max_replicas:
            action = "scale_up"
            target = min(state.replicas + SCALE_UP_STEP, state.max_replicas)
            why = f"above {SCALE_UP_UTIL} with pending work"
        else:
            why = f"above {SCALE_UP_UTIL} with pending work, but at the maximum"
    elif util > SCALE_UP_UTIL:
        why = f"above {SCALE_UP_UTIL} but nothing is pending"
    elif util < SCALE_DOWN_UTIL:
        if state.replicas > state.min_replicas:
            action = "scale_down"
            target = max(state.replicas - SCALE_DOWN_STEP, state.min_replicas)
            why = f"below {SCALE_DOWN_UTIL}"
        else:
            why = f"below {SCALE_DOWN_UTIL}, but at the minimum"
    return ScalingAdvice(
        state.pool,
        action,
        state.replicas,
        target,
        round(util, 4),
        round(mem, 4),
        totals.samples,
        f"{seen}: {why}",
    )


def advise_pools(
    states: Iterable[PoolState], samples_by_pool: dict[str, list[TelemetrySample]], now_ms: int
) -> list[ScalingAdvice]:
    """One recommendation per pool, in pool order."""
    return [
        scaling_advice(state, samples_by_pool.get(state.pool, []), now_ms)
        for state in sorted(states, key=lambda s: s.pool)
    ]


def advise_pools_from_totals(
    states: Iterable[PoolState], totals_by_pool: dict[str, WindowTotals]
) -> list[ScalingAdvice]:
    """One recommendation per pool, in pool order, from each pool's window totals."""
    return [
        advice_from_totals(state, totals_by_pool.get(state.pool, WindowTotals(0, 0, 0)))
        for state in sorted(states, key=lambda s: s.pool)
    ]


@dataclass(frozen=True)
class HeatCell:
    weekday: int  # Monday = 0
    hour: int
    samples: int
    idle_share: float | None  # share of GPU samples that were idle; None without data
    mean_util: float | None
    mean_mem_util: float | None


@dataclass(frozen=True)
class IdleHeatmap:
    cells: tuple[HeatCell, ...]  # 7 x 24, weekday-major

    def grid(self) -> list[list[float | None]]:
        """Idle shares as rows Monday..Sunday of 24 hours: the data of a heat map."""
        return [[c.idle_share for c in self.cells[d * 24 : d * 24 + 24]] for d in range(7)]

    def as_dict(self) -> dict[str, object]:
        return {
            "weekdays": list(WEEKDAYS),
            "hours": list(range(24)),
            "idle_share": self.grid(),
            "cells": [c.__dict__ for c in self.cells],
        }


def queueing_symptom(util: float | None, mem_util: float | None) -> bool:
    """High compute utilisation with low memory-bandwidth utilisation (both 0-1)."""
    if util is None or mem_util is None:
        return False
    return util >= QUEUEING_COMPUTE_MIN and mem_util <= QUEUEING_MEM_BW_MAX


@dataclass(frozen=True)
class HourTotals:
    """One GPU's (or a pool's) samples in one UTC hour, summed: what a telemetry store keeps
    so that a month of heat map is read from rollups, not from millions of raw samples."""

    hour_ms: int  # start of the UTC hour, Unix ms
    samples: int
    idle: int  # samples with compute utilisation below IDLE_UTIL_PCT
    util_sum: int  # sum of util_gpu_pct
    mem_sum: int  # sum of util_mem_pct


def hour_start_ms(t_ms: int) -> int:
    return t_ms - t_ms % MS_PER_HOUR


def hour_totals(
    samples: Iterable[TelemetrySample], idle_util_pct: int = IDLE_UTIL_PCT
) -> dict[tuple[str, int], HourTotals]:
    """Samples folded into per-GPU hourly totals, keyed by (GPU, hour start)."""
    acc: dict[tuple[str, int], list[int]] = {}
    for s in samples:
        sums = acc.setdefault((s.gpu, hour_start_ms(s.t_ms)), [0, 0, 0, 0])
        sums[0] += 1
        sums[1] += s.util_gpu_pct < idle_util_pct
        sums[2] += s.util_gpu_pct
        sums[3] += s.util_mem_pct
    return {key: HourTotals(key[1], *sums) for key, sums in acc.items()}


def idle_heatmap(
    samples: Iterable[TelemetrySample], utc_offset_h: int = 0, idle_util_pct: int = IDLE_UTIL_PCT
) -> IdleHeatmap:
    """Idle capacity by weekday x hour of day (local time = UTC + offset), from samples."""
    return heatmap_from_hours(hour_totals(samples, idle_util_pct).values(), utc_offset_h)


def heatmap_from_hours(hours: Iterable[HourTotals], utc_offset_h: int = 0) -> IdleHeatmap:
    """Idle capacity by weekday x hour of day (local time = UTC + offset), from hourly
    totals; the same map idle_heatmap draws from the samples they sum."""
    count = [0] * 168
    idle = [0] * 168
    util = [0] * 168
    mem = [0] * 168
    offset = utc_offset_h * MS_PER_HOUR
    for h in hours:
        local = h.hour_ms + offset
        cell = ((local // MS_PER_DAY + EPOCH_WEEKDAY) % 7) * 24 + (local // MS_PER_HOUR) % 24
        count[cell] += h.samples
        idle[cell] += h.idle
        util[cell] += h.util_sum
        mem[cell] += h.mem_sum
    cells = []
    for cell in range(168):
        n = count[cell]
        cells.append(
            HeatCell(
                cell // 24,
                cell % 24,
                n,
                round(idle[cell] / n, 4) if n else None,
                round(util[cell] / n / 100, 4) if n else None,
                round(mem[cell] / n / 100, 4) if n else None,
            )
        )
    return IdleHeatmap(tuple(cells))
