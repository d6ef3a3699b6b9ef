from __future__ import annotations

from decimal import Decimal
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.settlement import (
    MJ_PER_KWH,
    LeaseTerms,
    SettlementError,
    measure,
    settle_interval,
    settle_lease,
    settle_migration,
    settlement_amount,
    telemetry_digest,
    terms_from_price_line,
)
from scheduler.telemetry.sample import TelemetrySample

GPU = "GPU-aaaa"
HOUR_MS = 3_600_000


def sample(t_ms: int, energy_mj: int, gpu: str = GPU) -> TelemetrySample:
    return TelemetrySample(gpu, t_ms, energy_mj, 300_000, 90, 60, 70)


def terms(power_mw: int = 300_000, tariff: int = 120_000, gpu: str = GPU, gen="V100-SXM2"):
    return LeaseTerms("lease-1", gpu, gen, 0, power_mw, tariff)


def test_settlement_amount_is_half_even_in_micro_units():
    assert settlement_amount(MJ_PER_KWH, 0, 120_000) == 120_000  # 1 kWh over, at 0.12/kWh
    assert settlement_amount(0, MJ_PER_KWH, 120_000) == -120_000  # 1 kWh under: a credit
    assert settlement_amount(MJ_PER_KWH // 2, 0, 1) == 0  # 0.5 -> 0 (even)
    assert settlement_amount(3 * MJ_PER_KWH // 2, 0, 1) == 2  # 1.5 -> 2 (even)
    assert settlement_amount(0, MJ_PER_KWH // 2, 1) == 0  # -0.5 -> 0
    assert settlement_amount(0, 3 * MJ_PER_KWH // 2, 1) == -2  # -1.5 -> -2
    with pytest.raises(TypeError, match="measured_mj must be an int"):
        settlement_amount(1.5, 0, 1)  # type: ignore[arg-type]


def test_an_hour_at_the_priced_power_settles_to_zero():
    samples = [sample(t * 60_000, t * 60_000 * 300) for t in range(61)]  # 300 W for 1 h
    record = settle_interval(terms(), samples, 0, HOUR_MS)
    assert record.measured_mj == record.attributed_mj == 300 * 3600 * 1000
    assert record.amount_micro == 0 and record.covered_ms == HOUR_MS


def test_drawing_more_than_priced_is_owed_and_less_is_credited():
    samples = [sample(0, 0), sample(HOUR_MS, 400 * 3600 * 1000)]  # drew 400 Wh
    over = settle_interval(terms(power_mw=300_000), samples, 0, HOUR_MS)
    assert over.difference_mj == 100 * 3600 * 1000
    assert over.amount_micro == 12_000  # 0.1 kWh x 0.12 = 0.012
    under = settle_interval(terms(power_mw=500_000), samples, 0, HOUR_MS)
    assert under.amount_micro == -12_000


def test_counter_reset_starts_a_new_segment_and_never_goes_negative():
    samples = [sample(0, 5_000), sample(60_000, 9_000), sample(120_000, 100), sample(180_000, 700)]
    m = measure(samples, GPU, 0, 180_000)
    assert m.resets == 1
    assert m.measured_mj == 4_000 + 600
    assert m.covered_ms == 120_000  # the minute across the restart is unknown, not billed


def test_telemetry_gap_is_neither_measured_nor_attributed():
    samples = [sample(0, 0), sample(HOUR_MS, 300 * 3600 * 1000)]
    record = settle_interval(terms(), samples, 0, 2 * HOUR_MS)
    assert record.covered_ms == HOUR_MS and record.amount_micro == 0


def test_record_digest_is_sha256_of_the_canonical_rows():
    samples = [sample(0, 0), sample(1000, 300_000)]
    record = settle_interval(terms(), samples, 0, 1000)
    import hashlib

    rows = "".join(",".join(str(v) for v in s.canonical()) + "\n" for s in samples)
    assert record.telemetry_sha256 == hashlib.sha256(rows.encode()).hexdigest()
    assert record.business_key == f"lease-1:{GPU}:0:1000"


def test_other_gpus_samples_are_ignored():
    samples = [sample(0, 0), sample(1000, 300_000), sample(500, 10**9, gpu="GPU-other")]
    assert settle_interval(terms(), samples, 0, 1000).samples == 2


def test_migration_settles_each_side_at_its_own_terms():
    old, new = terms(gen="V100-SXM2"), terms(power_mw=700_000, gpu="GPU-bbbb", gen="H100")
    samples = [sample(0, 0), sample(HOUR_MS, 10**9)]
    samples += [sample(HOUR_MS, 0, "GPU-bbbb"), sample(2 * HOUR_MS, 2 * 10**9, "GPU-bbbb")]
    first, second = settle_migration(old, new, samples, 0, HOUR_MS, 2 * HOUR_MS)
    assert (first.generation, first.gpu, first.end_ms) == ("V100-SXM2", GPU, HOUR_MS)
    assert (second.generation, second.gpu, second.start_ms) == ("H100", "GPU-bbbb", HOUR_MS)
    assert second.attributed_mj == 700 * 3600 * 1000
    with pytest.raises(SettlementError, match="outside"):
        settle_migration(old, new, samples, 0, 3 * HOUR_MS, 2 * HOUR_MS)


def test_terms_from_a_price_line_fold_pue_into_the_tariff():
    t = terms_from_price_line(
        "l", GPU, "L40S", 0, Decimal("385.0000"), Decimal("0.10"), Decimal("1.25")
    )
    assert (t.attributed_power_mw, t.tariff_micro_per_kwh) == (385_000, 125_000)


def test_lease_settles_each_gpu():
    samples = [sample(0, 0), sample(1000, 1), sample(0, 0, "GPU-b"), sample(1000, 2, "GPU-b")]
    records = settle_lease([terms(gpu="GPU-b"), terms()], samples, 0, 1000)
    assert [r.gpu for r in records] == ["GPU-aaaa", "GPU-b"]


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
@given(traces(), st.integers(0, 2_000_000), st.integers(0, 500_000), st.data())
def test_split_settlements_sum_exactly_to_measured_minus_attributed(trace, power, tariff, data):
    t = terms(power_mw=power, tariff=tariff)
    start, end = trace[0].t_ms, trace[-1].t_ms
    cuts = sorted(set(data.draw(st.lists(st.sampled_from([s.t_ms for s in trace]), max_size=5))))
    bounds = [start, *[c for c in cuts if start < c < end], end]
    parts = [settle_interval(t, trace, a, b) for a, b in pairwise(bounds)]
    whole = settle_interval(t, trace, start, end)
    assert sum(p.measured_mj for p in parts) == whole.measured_mj
    assert sum(p.attributed_mj for p in parts) == whole.attributed_mj
    assert sum(p.difference_mj for p in parts) == whole.measured_mj - whole.attributed_mj
    for p in parts:
        assert p.difference_mj == p.measured_mj - p.attributed_mj
        assert p.amount_micro == settlement_amount(p.measured_mj, p.attributed_mj, tariff)
    # Money is rounded per record: the parts differ from the whole by at most half a
    # micro-unit each.
    assert abs(sum(p.amount_micro for p in parts) - whole.amount_micro) <= len(parts)


@settings(max_examples=200, deadline=None)
@given(traces(), st.randoms(use_true_random=False))
def test_replaying_the_same_telemetry_yields_the_same_settlement(trace, rng):
    first = settle_interval(terms(), trace, trace[0].t_ms, trace[-1].t_ms)
    shuffled = list(trace)
    rng.shuffle(shuffled)
    again = settle_interval(terms(), shuffled, trace[0].t_ms, trace[-1].t_ms)
    assert again == first
    assert first.telemetry_sha256 == telemetry_digest(trace)


@settings(max_examples=300, deadline=None)
@given(traces())
def test_a_counter_reset_never_produces_negative_energy(trace):
    m = measure(trace, GPU, trace[0].t_ms, trace[-1].t_ms)
    assert all(s.energy_mj >= 0 for s in m.segments)
    assert m.measured_mj >= 0
    assert m.resets == sum(1 for a, b in pairwise(trace) if b.energy_mj < a.energy_mj)
