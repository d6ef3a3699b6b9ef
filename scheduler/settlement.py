"""A lease interval's settlement: the one function the web app asks for a bill line.

Measured energy comes from the GPU's total-energy counter (NVML, mJ). The counter restarts
from zero when the driver reloads, so a counter that goes down starts a new *segment*;
the energy between the last sample before a reset and the first after is unknown and is
not counted (measured energy is never negative and never invented).

The line itself (capacity held, priced energy, measured energy, settlement, total) is
ledger.money's, from the lease's terms as the ledger records them; `lease_terms` builds
those terms from a price and the rate card. docs/billing.md is the model.

A line measures only readings a valid TPM quote of their node attested (docs/billing.md,
"Attested telemetry"): it is computed from the attested batches of its GPUs, cites those with
a reading inside the interval, and its telemetry digest is attest.readings' evidence digest
of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_EVEN
from itertools import pairwise
from typing import Any

from attest import readings
from ledger import money
from ledger.contract import bill_line
from ledger.contract.bill_line import MAX_BATCHES
from ledger.contract.terms import RateCard
from ledger.units import MS_PER_HOUR, MW_PER_W
from scheduler.catalogue import Catalogue
from scheduler.pricing import PriceBreakdown
from scheduler.telemetry.sample import TelemetryError, TelemetrySample


class SettlementError(ValueError):
    """Inputs that cannot be settled; the message names the lease, GPU and sample."""


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


def telemetry_digest(samples: Iterable[TelemetrySample]) -> str:
    """One GPU's digest (attest.readings), over its samples in time order."""
    return readings.gpu_digest(readings.row_text(s.canonical()) for s in samples)


def lease_terms(
    price: PriceBreakdown,
    catalogue: Catalogue,
    card: RateCard,
    *,
    site: str,
    priority: int,
    start_ms: int,
) -> dict[str, Any]:
    """The terms a lease records on the ledger for this price (docs/billing.md): a derated
    GPU's attributed power is capped at its board power and its planned time stretched so
    the planned energy is unchanged."""
    generations = {line.generation for line in price.lines}
    if len(generations) != 1:
        raise SettlementError(f"a lease runs on one generation, this price spans {generations}")
    generation = generations.pop()
    board_w = catalogue.get(generation).board_power_w
    power_mw: dict[str, int] = {}
    planned_ms = 0
    for line in price.lines:
        watts = min(line.attributed_power_w, board_w)
        energy_wh = line.gpu_hours * line.attributed_power_w
        power_mw[line.gpu] = int((watts * MW_PER_W).to_integral_value(ROUND_HALF_EVEN))
        hours = energy_wh / watts if watts > 0 else line.gpu_hours
        ms = (hours * MS_PER_HOUR).to_integral_value(ROUND_CEILING)
        planned_ms = max(planned_ms, int(ms), 1)
    rates = card.sites[site]
    return {
        "generation": generation,
        "precision": price.precision,
        "site": site,
        "priority": priority,
        "start_ms": start_ms,
        "planned_ms": planned_ms,
        "pue_milli": rates["pue_milli"],
        "tariff_micro_per_kwh": rates["tariff_micro_per_kwh"],
        "capacity_micro_per_gpu_hour": card.capacity_rate(generation, priority),
        "attributed_power_mw": dict(sorted(power_mw.items())),
    }


@dataclass(frozen=True)
class GpuMeasurement:
    gpu: str
    measured_mj: int
    covered_ms: int
    resets: int
    samples: int
    telemetry_sha256: str


@dataclass(frozen=True)
class AttestedBatch:
    """One GPU's readings between two quotes of its node, whose digest a valid quote bound."""

    gpu: str
    digest: str
    samples: tuple[TelemetrySample, ...]

    def cited(self) -> readings.Batch:
        return readings.Batch(self.gpu, self.digest, len(self.samples))


@dataclass(frozen=True)
class IntervalSettlement:
    """One bill line of a lease, ready to record and to relay to the ledger (`request`)."""

    lease: str
    seq: int
    start_ms: int
    end_ms: int
    final: bool
    generation: str
    measured_mj: int
    telemetry_digest: str
    terms: dict[str, Any]
    line: money.Line
    gpus: tuple[GpuMeasurement, ...]
    batches: tuple[readings.Batch, ...] = ()

    def request(self) -> dict[str, Any]:
        """The Settle arguments (ledger.contract.bill_line): the interval, its measurement,
        the rates of its terms and the amounts of its line."""
        return bill_line.settle_args(
            self.lease,
            self.seq,
            {
                **self.terms,
                **self.line.as_dict(),
                bill_line.START_MS: self.start_ms,
                bill_line.END_MS: self.end_ms,
                bill_line.FINAL: self.final,
                bill_line.MEASURED: self.measured_mj,
                bill_line.DIGEST: self.telemetry_digest,
                bill_line.BATCHES: [b.as_dict() for b in self.batches],
            },
        )


def cited_batches(
    batches: Iterable[AttestedBatch], gpus: Iterable[str], start_ms: int, end_ms: int
) -> list[AttestedBatch]:
    """The batches a line over [start_ms, end_ms] of `gpus` cites: those with a reading
    inside it, each GPU's in time order; a batch whose readings no longer hash to its digest
    is an error, never evidence."""
    wanted = set(gpus)
    out = []
    for batch in batches:
        if batch.gpu not in wanted or not any(start_ms <= s.t_ms <= end_ms for s in batch.samples):
            continue
        ordered = sorted(batch.samples, key=lambda s: s.t_ms)
        if telemetry_digest(ordered) != batch.digest:
            raise SettlementError(
                f"GPU {batch.gpu}: the stored readings of batch {batch.digest} do not hash to it"
            )
        out.append(AttestedBatch(batch.gpu, batch.digest, tuple(ordered)))
    return sorted(out, key=lambda b: (b.gpu, b.samples[0].t_ms))


def settle(
    lease: str,
    seq: int,
    terms: dict[str, Any],
    batches: Iterable[AttestedBatch],
    start_ms: int,
    end_ms: int,
    *,
    final: bool = False,
) -> IntervalSettlement:
    """The settlement of [start_ms, end_ms] of a lease under its ledger terms, measured from
    the attested batches of the terms' GPUs (readings no quote attested are not counted)."""
    if not terms["start_ms"] <= start_ms <= end_ms:
        raise SettlementError(
            f"lease {lease}: bad interval [{start_ms}, {end_ms}] "
            f"(terms start at {terms['start_ms']})"
        )
    cited = cited_batches(batches, terms["attributed_power_mw"], start_ms, end_ms)
    pool = [sample for batch in cited for sample in batch.samples]
    gpus = []
    for gpu in sorted(terms["attributed_power_mw"]):
        try:
            m = measure(pool, gpu, start_ms, end_ms)
        except TelemetryError as exc:
            raise SettlementError(f"lease {lease} GPU {gpu}: {exc}") from None
        digest = telemetry_digest(m.samples)
        gpus.append(
            GpuMeasurement(gpu, m.measured_mj, m.covered_ms, m.resets, len(m.samples), digest)
        )
    measured = sum(g.measured_mj for g in gpus)
    line = money.interval_line(money.Terms.of(terms), start_ms, end_ms, measured)
    return IntervalSettlement(
        lease=lease,
        seq=seq,
        start_ms=start_ms,
        end_ms=end_ms,
        final=final,
        generation=terms["generation"],
        measured_mj=measured,
        telemetry_digest=readings.evidence_digest(b.cited() for b in cited),
        terms=terms,
        line=line,
        gpus=tuple(gpus),
        batches=tuple(b.cited() for b in cited),
    )


def settle_lines(
    lease: str,
    seq: int,
    terms: dict[str, Any],
    batches: Iterable[AttestedBatch],
    start_ms: int,
    end_ms: int,
    *,
    final: bool = False,
    max_batches: int = MAX_BATCHES,
) -> list[IntervalSettlement]:
    """The lines that settle [start_ms, end_ms]: one, unless it has more attested batches
    than one line may cite (the contract's MAX_BATCHES); then it is cut at batch ends so each
    line cites at most `max_batches`. A line also cites the batches that end at its start
    and those running past its end, at most one of each per GPU: hence the room left."""
    pool = list(batches)
    gpus = terms["attributed_power_mw"]
    cited = cited_batches(pool, gpus, start_ms, end_ms)
    room = max_batches - 3 * len(gpus)
    if len(cited) <= max_batches or room < 1:
        return [settle(lease, seq, terms, pool, start_ms, end_ms, final=final)]
    ends = sorted(b.samples[-1].t_ms for b in cited)
    cuts = sorted({t for t in ends[room - 1 :: room] if start_ms < t < end_ms})
    bounds = list(pairwise([start_ms, *cuts, end_ms]))
    return [
        settle(lease, seq + i, terms, pool, a, b, final=final and i == len(bounds) - 1)
        for i, (a, b) in enumerate(bounds)
    ]
