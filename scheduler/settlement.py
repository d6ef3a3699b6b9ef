"""Settlement arithmetic: what a lease drew against what it was priced at.

Measured energy comes from the GPU's total-energy counter (NVML, mJ). The counter restarts
from zero when the driver reloads, so a counter that goes down starts a new *segment*;
the energy between the last sample before a reset and the first after is unknown and is
not counted (measured energy is never negative and never invented). Only the time covered
by segments is attributed too, so a telemetry gap never bills a tenant for energy that
was not measured.

Attributed energy is the lease's price basis: the attributed power of the GPU (the price
line's `attributed_power_w`: datasheet or measured watts x derating) over the covered
time. It is computed cumulatively from the lease start (A(t) = round(P x (t - start))), so
the attributed energy of adjacent intervals adds up exactly to that of their union.

amount = settlement_amount(measured_mj, attributed_mj, tariff_micro_per_kwh): positive
when the lease drew more than it was priced at (the tenant owes the difference), negative
when it drew less (a credit). The tariff is the effective one per kWh of GPU energy (site
tariff x PUE), in micro-units of currency.

Each record carries the SHA-256 of the canonical telemetry it used: the samples in time
order, each as the CSV row `t_ms,gpu,energy_mj,power_mw,util_gpu_pct,util_mem_pct,temp_c`
with "\\n" line ends (the same bytes as a trace file's rows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from ledger.money import div_half_even, settlement_amount  # the one money formula
from scheduler.telemetry.sample import TelemetryError, TelemetrySample

MJ_PER_KWH = 3_600_000_000
MICRO_PER_UNIT = 1_000_000
MW_PER_W = 1000
MS_PER_S = 1000


class SettlementError(ValueError):
    """Inputs that cannot be settled; the message names the lease, GPU and sample."""


@dataclass(frozen=True)
class LeaseTerms:
    """The price basis of one GPU of a lease, fixed when the lease was written."""

    lease: str
    gpu: str  # NVML UUID
    generation: str
    lease_start_ms: int
    attributed_power_mw: int
    tariff_micro_per_kwh: int  # per kWh of GPU energy: site tariff x PUE


def terms_from_price_line(
    lease: str,
    gpu_uuid: str,
    generation: str,
    lease_start_ms: int,
    attributed_power_w: Decimal,
    tariff_per_kwh: Decimal,
    pue: Decimal,
) -> LeaseTerms:
    """LeaseTerms from a pricing.GpuLine's figures (rounded half-even to integers)."""

    def whole(value: Decimal) -> int:
        return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))

    return LeaseTerms(
        lease=lease,
        gpu=gpu_uuid,
        generation=generation,
        lease_start_ms=lease_start_ms,
        attributed_power_mw=whole(attributed_power_w * MW_PER_W),
        tariff_micro_per_kwh=whole(tariff_per_kwh * pue * MICRO_PER_UNIT),
    )


@dataclass(frozen=True)
class Segment:
    start_ms: int
    end_ms: int
    energy_mj: int  # counter delta within the segment, >= 0


@dataclass(frozen=True)
class Measurement:
    segments: tuple[Segment, ...]
    resets: int  # counter went down this many times
    samples: tuple[TelemetrySample, ...]  # the ones used, in time order

    @property
    def measured_mj(self) -> int:
        return sum(s.energy_mj for s in self.segments)

    @property
    def covered_ms(self) -> int:
        return sum(s.end_ms - s.start_ms for s in self.segments)


def measure(
    samples: Iterable[TelemetrySample], gpu: str, start_ms: int, end_ms: int
) -> Measurement:
    """Energy-counter deltas of `gpu` within [start_ms, end_ms], split at counter resets."""
    used = sorted(
        (s for s in samples if s.gpu == gpu and start_ms <= s.t_ms <= end_ms), key=lambda s: s.t_ms
    )
    segments: list[Segment] = []
    resets = 0
    first = previous = used[0] if used else None
    for sample in used[1:]:
        assert first is not None and previous is not None
        if sample.t_ms == previous.t_ms:
            if sample.energy_mj != previous.energy_mj:
                raise SettlementError(
                    f"GPU {gpu}: two samples at t_ms {sample.t_ms} disagree on the counter"
                )
            continue
        if sample.energy_mj < previous.energy_mj:  # driver restart: a new segment begins
            resets += 1
            segments.append(
                Segment(first.t_ms, previous.t_ms, previous.energy_mj - first.energy_mj)
            )
            first = sample
        previous = sample
    if first is not None and previous is not None and previous.t_ms > first.t_ms:
        segments.append(Segment(first.t_ms, previous.t_ms, previous.energy_mj - first.energy_mj))
    return Measurement(tuple(s for s in segments if s.end_ms > s.start_ms), resets, tuple(used))


def attributed_mj(terms: LeaseTerms, segments: Iterable[Segment]) -> int:
    """Attributed energy over the segments, cumulative from the lease start (exact over
    adjacent intervals)."""

    def cumulative(t_ms: int) -> int:  # mW x ms = uJ; / 1000 -> mJ
        return div_half_even(terms.attributed_power_mw * (t_ms - terms.lease_start_ms), MS_PER_S)

    return sum(cumulative(s.end_ms) - cumulative(s.start_ms) for s in segments)


def telemetry_digest(samples: Iterable[TelemetrySample]) -> str:
    digest = hashlib.sha256()
    for sample in samples:
        digest.update((",".join(str(v) for v in sample.canonical()) + "\n").encode("ascii"))
    return digest.hexdigest()


@dataclass(frozen=True)
class SettlementRecord:
    lease: str
    gpu: str
    generation: str
    start_ms: int
    end_ms: int
    covered_ms: int
    measured_mj: int
    attributed_mj: int
    difference_mj: int  # measured - attributed
    tariff_micro_per_kwh: int
    amount_micro: int  # > 0: the tenant owes; < 0: a credit
    resets: int
    samples: int
    telemetry_sha256: str

    @property
    def business_key(self) -> str:
        """Idempotency key for the ledger: one settlement per lease, GPU and interval."""
        return f"{self.lease}:{self.gpu}:{self.start_ms}:{self.end_ms}"

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "business_key": self.business_key}


def settle_interval(
    terms: LeaseTerms, samples: Iterable[TelemetrySample], start_ms: int, end_ms: int
) -> SettlementRecord:
    """Settle one GPU of a lease over [start_ms, end_ms] from its telemetry samples."""
    if end_ms < start_ms or start_ms < terms.lease_start_ms:
        raise SettlementError(
            f"lease {terms.lease} GPU {terms.gpu}: bad interval [{start_ms}, {end_ms}] "
            f"(lease started at {terms.lease_start_ms})"
        )
    try:
        measurement = measure(samples, terms.gpu, start_ms, end_ms)
    except TelemetryError as exc:
        raise SettlementError(f"lease {terms.lease} GPU {terms.gpu}: {exc}") from None
    measured = measurement.measured_mj
    attributed = attributed_mj(terms, measurement.segments)
    return SettlementRecord(
        lease=terms.lease,
        gpu=terms.gpu,
        generation=terms.generation,
        start_ms=start_ms,
        end_ms=end_ms,
        covered_ms=measurement.covered_ms,
        measured_mj=measured,
        attributed_mj=attributed,
        difference_mj=measured - attributed,
        tariff_micro_per_kwh=terms.tariff_micro_per_kwh,
        amount_micro=settlement_amount(measured, attributed, terms.tariff_micro_per_kwh),
        resets=measurement.resets,
        samples=len(measurement.samples),
        telemetry_sha256=telemetry_digest(measurement.samples),
    )


def settle_lease(
    terms: Iterable[LeaseTerms], samples: Iterable[TelemetrySample], start_ms: int, end_ms: int
) -> list[SettlementRecord]:
    """One record per GPU of the lease, in GPU order."""
    pool = list(samples)
    return [settle_interval(t, pool, start_ms, end_ms) for t in sorted(terms, key=lambda t: t.gpu)]


def settle_migration(
    before: LeaseTerms,
    after: LeaseTerms,
    samples: Iterable[TelemetrySample],
    start_ms: int,
    move_ms: int,
    end_ms: int,
) -> tuple[SettlementRecord, SettlementRecord]:
    """A lease that moved between GPUs (and generations) at `move_ms`: the interval before
    the move is settled on the old GPU at the old terms, the rest on the new one at the
    new terms."""
    if not start_ms <= move_ms <= end_ms:
        raise SettlementError(
            f"lease {before.lease}: move at {move_ms} is outside [{start_ms}, {end_ms}]"
        )
    pool = list(samples)
    return (
        settle_interval(before, pool, start_ms, move_ms),
        settle_interval(after, pool, move_ms, end_ms),
    )
