"""Synthetic fleet telemetry whose idle pattern follows the seed's Q2 profile (chapter
2.1): 62.3% of GPUs idle 02:00-05:00, 19.1% idle 10:00-13:00, 38.7% idle over the day.

The seed gives only those anchors for a typical workday; the hours between are linear
interpolations, shifted by one constant so the daily mean is 38.7%. The same profile is
used every day of the week (the seed has no weekend figures). Busy GPUs draw compute and
memory-bandwidth utilisation independently, so high compute utilisation with low
bandwidth shows up, as it does in real traces (the seed's first trap).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from ledger.units import MS_PER_HOUR, MS_PER_S, MW_PER_W
from scheduler.telemetry.sample import TelemetrySample

IDLE_ANCHORS = {2: 0.623, 3: 0.623, 4: 0.623, 10: 0.191, 11: 0.191, 12: 0.191}
DAILY_MEAN_IDLE = 0.387
IDLE_UTIL_PCT = 5  # a sample below this compute utilisation counts as idle
IDLE_POWER_SHARE = 0.12  # idle draw as a share of board power
RESET_PROBABILITY = 2e-5  # per sample: a driver restart zeroes the energy counter


def _profile() -> tuple[float, ...]:
    anchors = sorted(IDLE_ANCHORS.items())
    hours: list[float] = []
    for hour in range(24):
        if hour in IDLE_ANCHORS:
            hours.append(IDLE_ANCHORS[hour])
            continue
        # Linear between the nearest anchors before and after (wrapping midnight).
        before = max(((h if h <= hour else h - 24), v) for h, v in anchors)
        after = min(((h if h >= hour else h + 24), v) for h, v in anchors)
        share = (hour - before[0]) / (after[0] - before[0])
        hours.append(before[1] + share * (after[1] - before[1]))
    free = [h for h in range(24) if h not in IDLE_ANCHORS]
    shift = (DAILY_MEAN_IDLE * 24 - sum(hours)) / len(free)
    return tuple(v + shift if h in free else v for h, v in enumerate(hours))


Q2_IDLE_BY_HOUR = _profile()


@dataclass(frozen=True)
class SyntheticGpu:
    uuid: str
    board_power_w: int


def _reading(rng: random.Random, gpu: SyntheticGpu, working: bool) -> tuple[int, int, int, int]:
    """(util %, memory-bandwidth %, power mW, temperature °C) of a GPU idle or working."""
    if working:
        util, mem = rng.randrange(55, 101), rng.randrange(15, 96)
        power_w = gpu.board_power_w * (0.45 + 0.5 * util / 100)
        return util, mem, int(power_w * MW_PER_W), rng.randrange(55, 88)
    util, mem = rng.randrange(0, IDLE_UTIL_PCT), rng.randrange(0, 4)
    return util, mem, int(gpu.board_power_w * IDLE_POWER_SHARE * MW_PER_W), rng.randrange(32, 46)


def _advance(rng: random.Random, energy: dict[str, int], gpu: str, power_mw: int, step_s: int):
    if rng.random() < RESET_PROBABILITY:
        energy[gpu] = 0  # driver restart
    else:
        energy[gpu] += power_mw * step_s  # mW x s = mJ


def synthetic_trace(
    gpus: list[SyntheticGpu],
    start_ms: int,
    hours: float,
    step_s: int = 60,
    seed: int = 0,
    utc_offset_h: int = 0,
) -> Iterator[TelemetrySample]:
    """Samples for every GPU every `step_s`, in time order. Lazy: 10,000 GPUs for a day is
    14 million samples. `utc_offset_h` places the profile in the fleet's local time."""
    rng = random.Random(seed)
    energy = {gpu.uuid: rng.randrange(0, 10**9) for gpu in gpus}
    steps = int(hours * 3600 // step_s)
    for step in range(steps + 1):
        t_ms = start_ms + step * step_s * MS_PER_S
        hour = (t_ms // MS_PER_HOUR + utc_offset_h) % 24
        idle_p = Q2_IDLE_BY_HOUR[hour]
        for gpu in gpus:
            util, mem, power_mw, temp = _reading(rng, gpu, rng.random() >= idle_p)
            _advance(rng, energy, gpu.uuid, power_mw, step_s if step else 0)
            yield TelemetrySample(gpu.uuid, t_ms, energy[gpu.uuid], power_mw, util, mem, temp)


def occupancy_trace(
    gpus: list[SyntheticGpu],
    leased: Collection[str],
    start_ms: int,
    seconds: int,
    step_s: int,
    rng: random.Random,
    energy: dict[str, int],
) -> Iterator[TelemetrySample]:
    """Samples of a fleet where only leased GPUs work: a GPU no lease holds shows 0 %
    compute and memory-bandwidth utilisation and draws its idle power. `energy` holds each
    GPU's counter (mJ) and is advanced in place, so consecutive pieces of trace continue
    one another; the first sample of a piece is one step after `start_ms`."""
    for step in range(1, seconds // step_s + 1):
        t_ms = start_ms + step * step_s * MS_PER_S
        for gpu in gpus:
            if gpu.uuid in leased:
                util, mem, power_mw, temp = _reading(rng, gpu, True)
            else:
                util, mem = 0, 0
                power_mw = int(gpu.board_power_w * IDLE_POWER_SHARE * MW_PER_W)
                temp = rng.randrange(30, 40)
            if gpu.uuid not in energy:
                energy[gpu.uuid] = rng.randrange(0, 10**9)
            _advance(rng, energy, gpu.uuid, power_mw, step_s)
            yield TelemetrySample(gpu.uuid, t_ms, energy[gpu.uuid], power_mw, util, mem, temp)


def synthetic_fleet(count: int, seed: int = 0) -> list[SyntheticGpu]:
    """`count` GPUs with NVML-style UUIDs and a mix of board powers (250-700 W)."""
    rng = random.Random(seed)
    return [
        SyntheticGpu(f"GPU-{rng.getrandbits(128):032x}", rng.choice((250, 300, 350, 400, 700)))
        for _ in range(count)
    ]
