from __future__ import annotations

from decimal import Decimal

from ledger import money
from ledger.contract.terms import load_rate_card
from scheduler.api import lease_terms, plan_batch, price_lease, settle
from scheduler.catalogue import load_catalogue
from scheduler.pricing import GpuCondition
from scheduler.telemetry.sample import TelemetrySample
from tests.scheduler.helpers import attested, job, node, plan_input

HOUR_MS = 3_600_000


def test_price_lease_prices_a_set_of_gpus():
    conds = [GpuCondition(f"g{i}", "L40S", Decimal("1.2"), Decimal("0.1")) for i in range(2)]
    price = price_lease("FP16", conds, Decimal(3))
    assert len(price.lines) == 2 and price.total > 0


def test_price_lease_takes_a_memory_bound_fraction_and_new_generations():
    conds = [GpuCondition("g0", "H200-SXM5-141GB", Decimal("1.2"), Decimal("0.1"))]
    compute = price_lease("INT8", conds, Decimal(3))
    memory = price_lease("INT8", conds, Decimal(3), memory_bound=Decimal("0.5"))
    assert compute.lines[0].gpu_hours == Decimal("0.189499")  # 3 x 125 / 1978.9
    # 3 x (0.5 x 125 / 1978.9 + 0.5 x 900 / 4800): H200 bandwidth, V100 FP16 as the unit
    assert memory.lines[0].gpu_hours == Decimal("0.376000")
    assert memory.total > compute.total


def test_plan_then_settle_a_lease_that_drew_exactly_its_price_basis():
    result = plan_batch(plan_input(node("GPU-n", "A100-SXM4-80GB", 2), [job("j", gpus=2)]))
    (placement,) = result.placements
    card = load_rate_card()
    terms = lease_terms(
        placement.price, load_catalogue(), card, site="fra-1", priority=0, start_ms=0
    )
    assert list(terms["attributed_power_mw"].values()) == [400_000, 400_000]
    end = terms["planned_ms"]
    samples = [
        TelemetrySample(gpu, ms, ms * 400, 400_000, 90, 55, 60)  # 400 W = 400 mJ per ms
        for gpu in terms["attributed_power_mw"]
        for ms in (0, end)
    ]
    line = settle("lease-j", 0, terms, attested(samples), 0, end, final=True).line
    assert line.settlement_micro == 0 and line.measured_energy_micro > 0
    assert line.total_micro == money.Terms.of(terms).quote()
