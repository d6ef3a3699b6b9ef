from __future__ import annotations

import hashlib
from decimal import Decimal
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest import readings
from ledger import money
from ledger.contract.terms import load_rate_card
from scheduler.catalogue import load_catalogue
from scheduler.pricing import GpuCondition, Pricer
from scheduler.settlement import (
    AttestedBatch,
    SettlementError,
    lease_terms,
    measure,
    settle,
    settle_lines,
    telemetry_digest,
)
from scheduler.telemetry.sample import TelemetrySample
from tests.scheduler.helpers import attested

GPU = "GPU-aaaa"
HOUR_MS = 3_600_000


def sample(t_ms: int, energy_mj: int, gpu: str = GPU) -> TelemetrySample:
    return TelemetrySample(gpu, t_ms, energy_mj, 300_000, 90, 60, 70)


def terms(power_mw: int = 300_000, gpus: tuple[str, ...] = (GPU,), start_ms: int = 0) -> dict:
    """Ledger terms of a V100 lease at fra-1 (as ledger.contract.terms checks them)."""
    return {
        "generation": "V100-SXM2",
        "precision": "FP16",
        "site": "fra-1",
        "priority": 0,
        "start_ms": start_ms,
        "planned_ms": HOUR_MS,
        "pue_milli": 1120,
        "tariff_micro_per_kwh": 210_000,
        "capacity_micro_per_gpu_hour": 400_000,
        "attributed_power_mw": dict.fromkeys(gpus, power_mw),
    }


def test_an_interval_is_the_ledgers_line_from_the_terms():
    samples = [sample(t * 60_000, t * 60_000 * 300) for t in range(61)]  # 300 W for 1 h
    s = settle("lease-1", 0, terms(), attested(samples), 0, HOUR_MS, final=True)
    assert s.measured_mj == 300 * 3600 * 1000 and s.gpus[0].covered_ms == HOUR_MS
    assert s.line == money.interval_line(money.Terms.of(terms()), 0, HOUR_MS, s.measured_mj)
    request = s.request()
    assert (request["interval_seq"], request["final"], request["total_micro"]) == (
        0,
        True,
        s.line.total_micro,
    )


def test_counter_reset_starts_a_new_segment_and_never_goes_negative():
    samples = [sample(0, 5_000), sample(60_000, 9_000), sample(120_000, 100), sample(180_000, 700)]
    m = measure(samples, GPU, 0, 180_000)
    assert m.resets == 1
    assert m.measured_mj == 4_000 + 600
    assert m.covered_ms == 120_000  # the minute across the restart is unknown, not billed


def test_telemetry_gap_is_not_measured_but_capacity_is_held():
    samples = [sample(0, 0), sample(HOUR_MS, 300 * 3600 * 1000)]
    s = settle("lease-1", 0, terms(), attested(samples), 0, 2 * HOUR_MS)
    assert s.gpus[0].covered_ms == HOUR_MS and s.measured_mj == 300 * 3600 * 1000
    assert s.line.capacity_micro == 2 * 400_000


def test_digest_is_sha256_of_the_canonical_rows_per_gpu():
    samples = [sample(0, 0), sample(1000, 300_000)]
    s = settle("lease-1", 0, terms(), attested(samples), 0, 1000)
    rows = "".join(",".join(str(v) for v in x.canonical()) + "\n" for x in samples)
    per_gpu = hashlib.sha256(rows.encode()).hexdigest()
    assert s.gpus[0].telemetry_sha256 == per_gpu
    cited = f"{GPU}:{per_gpu}:2\n"  # the line cites its one batch of two readings
    assert s.telemetry_digest == hashlib.sha256(cited.encode()).hexdigest()
    assert s.request()["telemetry_batches"] == [{"gpu": GPU, "digest": per_gpu, "rows": 2}]


def test_only_attested_readings_count_and_only_batches_inside_the_interval_are_cited():
    early = attested([sample(0, 0), sample(1000, 300_000)])
    late = attested([sample(5000, 10**6), sample(6000, 10**6 + 300_000)])
    s = settle("l", 0, terms(), [*early, *late], 0, 1000)
    assert s.measured_mj == 300_000 and s.batches == (early[0].cited(),)
    assert settle("l", 0, terms(), [], 0, 1000).measured_mj == 0  # nothing attested, no energy
    assert s.telemetry_digest == readings.evidence_digest([early[0].cited()])


def test_a_batch_whose_stored_readings_do_not_hash_to_it_is_an_error():
    (batch,) = attested([sample(0, 0), sample(1000, 300_000)])
    forged = AttestedBatch(GPU, batch.digest, (sample(0, 0), sample(1000, 900_000)))
    with pytest.raises(SettlementError, match="do not hash to it"):
        settle("l", 0, terms(), [forged], 0, 1000)


def test_other_gpus_samples_are_ignored_and_each_gpu_of_the_lease_counts():
    samples = [sample(0, 0), sample(1000, 300_000), sample(500, 10**9, gpu="GPU-other")]
    assert settle("l", 0, terms(), attested(samples), 0, 1000).gpus[0].samples == 2
    both = terms(gpus=(GPU, "GPU-b"))
    samples += [sample(0, 0, "GPU-b"), sample(1000, 2, "GPU-b")]
    s = settle("l", 0, both, attested(samples), 0, 1000)
    assert [g.gpu for g in s.gpus] == [GPU, "GPU-b"] and s.measured_mj == 300_002


def test_interval_before_the_terms_is_refused():
    with pytest.raises(SettlementError, match="bad interval"):
        settle("l", 0, terms(start_ms=1000), [], 0, 2000)


def test_terms_cap_derated_power_at_the_board_and_stretch_the_planned_time():
    catalogue = load_catalogue()
    card = load_rate_card()
    hot = GpuCondition(GPU, "H100-SXM5-80GB", Decimal("1.12"), Decimal("0.21"), temp_c=Decimal(90))
    price = Pricer(catalogue).price("FP16", 1, Decimal(10), [hot])
    t = lease_terms(price, catalogue, card, site="fra-1", priority=0, start_ms=0)
    assert t["attributed_power_mw"] == {GPU: 700_000}  # not 770 W
    plain = Pricer(catalogue).price(
        "FP16", 1, Decimal(10), [hot.__class__(GPU, hot.generation, hot.pue, hot.tariff_per_kwh)]
    )
    cool = lease_terms(plain, catalogue, card, site="fra-1", priority=0, start_ms=0)
    assert abs(t["planned_ms"] - cool["planned_ms"] * 11 // 10) <= 20  # x 1.1, to the quantum
    assert (t["pue_milli"], t["tariff_micro_per_kwh"]) == (1120, 210_000)
    assert (
        lease_terms(price, catalogue, card, site="fra-1", priority=1, start_ms=0)[
            "capacity_micro_per_gpu_hour"
        ]
        == 2_700_000
    )


@st.composite
def traces(draw):
    """A time-ordered counter trace with random draws and occasional driver restarts."""
    n = draw(st.integers(2, 40))
    t, energy, out = 0, draw(st.integers(0, 10**12)), []
    for _ in range(n):
        out.append(sample(t, energy))
        t += draw(st.integers(1, 120_000))
        if draw(st.integers(0, 9)) == 0:
            energy = draw(st.integers(0, 10**6))  # reset (or a smaller counter)
        else:
            energy += draw(st.integers(0, 700 * 120_000))
    return out


@settings(max_examples=200, deadline=None)
@given(traces(), st.data())
def test_split_measurements_sum_exactly_to_the_whole(trace, data):
    start, end = trace[0].t_ms, trace[-1].t_ms
    cuts = sorted(set(data.draw(st.lists(st.sampled_from([s.t_ms for s in trace]), max_size=5))))
    bounds = [start, *[c for c in cuts if start < c < end], end]
    parts = [
        settle("l", i, terms(), attested(trace), a, b) for i, (a, b) in enumerate(pairwise(bounds))
    ]
    whole = settle("l", 0, terms(), attested(trace), start, end)
    assert sum(p.measured_mj for p in parts) == whole.measured_mj
    assert sum(p.line.capacity_micro for p in parts) == whole.line.capacity_micro
    assert sum(p.line.priced_energy_micro for p in parts) == whole.line.priced_energy_micro
    assert all(p.line.total_micro >= 0 for p in parts)


@settings(max_examples=200, deadline=None)
@given(traces(), st.randoms(use_true_random=False))
def test_replaying_the_same_telemetry_yields_the_same_settlement(trace, rng):
    first = settle("l", 0, terms(), attested(trace), trace[0].t_ms, trace[-1].t_ms)
    shuffled = list(trace)
    rng.shuffle(shuffled)
    again = settle("l", 0, terms(), attested(shuffled), trace[0].t_ms, trace[-1].t_ms)
    assert again == first
    assert first.gpus[0].telemetry_sha256 == telemetry_digest(trace)


@settings(max_examples=300, deadline=None)
@given(traces())
def test_a_counter_reset_never_produces_negative_energy(trace):
    m = measure(trace, GPU, trace[0].t_ms, trace[-1].t_ms)
    assert all(s.energy_mj >= 0 for s in m.segments)
    assert m.measured_mj >= 0
    assert m.resets == sum(1 for a, b in pairwise(trace) if b.energy_mj < a.energy_mj)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 3), st.integers(6, 12))
def test_an_interval_with_more_batches_than_a_line_may_cite_is_cut_into_lines(
    quotes, gpus, max_batches
):
    """Each line cites at most max_batches, the lines tile the interval, measure what the
    whole does, and only the last is final."""
    uuids = [f"GPU-{g}" for g in range(gpus)]
    batches = [
        batch
        for q in range(quotes)  # each quote binds 10 s of 1 Hz readings of every GPU
        for batch in attested(
            [sample(t * 1000, t * 300_000, g) for g in uuids for t in range(10 * q, 10 * q + 10)]
        )
    ]
    end = 10_000 * quotes - 1000
    lines = settle_lines(
        "l", 0, terms(gpus=tuple(uuids)), batches, 0, end, final=True, max_batches=max_batches
    )
    whole = settle("l", 0, terms(gpus=tuple(uuids)), batches, 0, end)
    if max_batches > 3 * gpus:  # room for the batches across each cut
        assert all(len(line.batches) <= max_batches for line in lines)
        assert len(lines) > 1 or len(whole.batches) <= max_batches
    else:
        assert len(lines) == 1
    assert [(a.end_ms, a.seq + 1) for a in lines[:-1]] == [(b.start_ms, b.seq) for b in lines[1:]]
    assert (lines[0].start_ms, lines[-1].end_ms) == (0, end)
    assert sum(line.measured_mj for line in lines) == whole.measured_mj
    assert [line.final for line in lines] == [False] * (len(lines) - 1) + [True]
