from __future__ import annotations

from decimal import Decimal

from scheduler.api import lease_terms, plan_batch, price_lease, settle_lease
from scheduler.pricing import GpuCondition
from scheduler.telemetry.sample import TelemetrySample
from tests.scheduler.helpers import job, node, plan_input

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
    terms = lease_terms("lease-j", placement, lease_start_ms=0)
    assert [t.attributed_power_mw for t in terms] == [400_000, 400_000]
    samples = [
        TelemetrySample(t.gpu, ms, ms * 400, 400_000, 90, 55, 60)  # 400 W = 400 mJ per ms
        for t in terms
        for ms in range(0, HOUR_MS + 1, 60_000)
    ]
    records = settle_lease(terms, samples, 0, HOUR_MS)
    assert [r.amount_micro for r in records] == [0, 0]
    assert all(r.measured_mj == 400 * HOUR_MS for r in records)
