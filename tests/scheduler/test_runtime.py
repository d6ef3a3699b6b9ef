"""The runtime estimate: a job runs at the generation's dense throughput at its precision
for the compute-bound part of its baseline runtime, and at the memory-bandwidth ratio for
the part it declares memory-bound (docs/scheduler.md, "Runtime estimate"). Before this model
every job was assumed to speed up by the peak dense ratio (7.9x H100-SXM5 over V100)."""

from __future__ import annotations

import json
from decimal import Decimal as D

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.catalogue import PRECISIONS, load_catalogue
from scheduler.fleet import PlanInputError, parse_plan_input
from scheduler.placement import plan
from scheduler.pricing import GpuCondition, Pricer, PricingError
from tests.scheduler.helpers import job, node, plan_input

H100 = "H100-SXM5-80GB"


def h100(pue: str = "1.25", tariff: str = "0.12") -> GpuCondition:
    return GpuCondition("g0", H100, D(pue), D(tariff))


def test_compute_bound_runtime_is_the_dense_throughput_ratio(catalogue):
    price = Pricer(catalogue).price("FP16", 1, D(10), [h100()])
    assert price.lines[0].gpu_hours == D("1.263392")  # 10 x 125 / 989.4
    assert "memory_bound" not in price.as_dict()  # compute-bound prices read as before


def test_fully_memory_bound_runtime_is_the_bandwidth_ratio(catalogue):
    price = Pricer(catalogue).price("FP16", 1, D(10), [h100()], memory_bound=D(1))
    assert price.lines[0].gpu_hours == D("2.686567")  # 10 x 900 / 3350, not 1.263392


def test_worked_example_of_the_docs(catalogue):
    """docs/scheduler.md: 10 V100 FP16 hours, half memory-bound, on one H100-SXM5."""
    pricer = Pricer(catalogue)
    runtime = pricer.runtime_hours(H100, "FP16", D(10), D("0.5"))
    assert round(runtime, 6) == D("1.974980")  # 10 x (0.5 x 125/989.4 + 0.5 x 900/3350)
    assert round(pricer.throughput(catalogue.get(H100), "FP16", D("0.5")), 3) == D("632.918")
    price = pricer.price("FP16", 1, D(10), [h100()], memory_bound=D("0.5"))
    assert price.lines[0].gpu_hours == D("1.974980")
    assert price.energy_kwh == D("1.382486")  # 1.974980 h x 700 W
    assert price.facility_energy_kwh == D("1.728107")  # x PUE 1.25
    assert price.total == D("0.207373")  # x 0.12 per kWh
    assert price.as_dict()["memory_bound"] == "0.5"


def test_the_baseline_runs_its_own_hours_whatever_the_fraction(catalogue):
    pricer = Pricer(catalogue)
    for fraction in ("0", "0.3", "1"):
        assert pricer.runtime_hours("V100-SXM2", "FP16", D(10), D(fraction)) == D(10)


def test_runtime_grows_with_the_memory_bound_fraction_on_a_faster_generation(catalogue):
    pricer = Pricer(catalogue)
    runtimes = [pricer.runtime_hours(H100, "BF16", D(4), D(f) / 10) for f in range(11)]
    assert runtimes == sorted(runtimes) and runtimes[0] < runtimes[-1]


def test_fraction_outside_zero_to_one_is_refused(catalogue):
    with pytest.raises(PricingError, match=r"memory_bound must be in \[0, 1\], got 1.5"):
        Pricer(catalogue).price("FP16", 1, D(1), [h100()], memory_bound=D("1.5"))


CATALOGUE = load_catalogue()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(CATALOGUE.generations)),
    st.sampled_from(PRECISIONS),
    st.decimals(0, 1, places=4),
    st.decimals(D("0.25"), 100, places=2),
)
def test_runtime_is_linear_in_the_fraction_between_its_two_bounds(gid, precision, f, hours):
    assume(CATALOGUE.get(gid).supports(precision))
    pricer = Pricer(CATALOGUE)
    compute = pricer.runtime_hours(gid, precision, hours, D(0))
    memory = pricer.runtime_hours(gid, precision, hours, D(1))
    mixed = pricer.runtime_hours(gid, precision, hours, f)
    assert abs(mixed - ((1 - f) * compute + f * memory)) < D("1e-18") * hours
    assert min(compute, memory) - D("1e-18") <= mixed <= max(compute, memory) + D("1e-18")


def run(catalogue, raw):
    return plan(parse_plan_input(json.loads(json.dumps(raw)), catalogue), catalogue)


def test_a_memory_bound_job_goes_where_bandwidth_per_watt_is_cheapest(catalogue):
    """Compute-bound FP16 work is cheapest on an L4 (0.595 W per dense TFLOPS against the
    H100's 0.707); bandwidth-bound work is cheapest on the H100 (700 W / 3350 GB/s against
    72 W / 300 GB/s). The old estimate sent both to the L4."""
    gpus = node("l4", "L4", 1) + node("h", H100, 1, site="s1")
    compute = run(catalogue, plan_input(gpus, [job("j", precision="FP16")]))
    memory = run(catalogue, plan_input(gpus, [job("j", precision="FP16", memory_bound="1")]))
    assert compute.placements[0].generation == "L4"
    assert memory.placements[0].generation == H100
    assert memory.placements[0].price.lines[0].gpu_hours == D("2.686567")


def test_plan_input_accepts_the_fraction_and_names_a_bad_one(catalogue):
    raw = plan_input(node("h", H100, 1), [job("j", memory_bound="0.25")])
    assert parse_plan_input(raw, catalogue).jobs[0].memory_bound == D("0.25")
    for bad, message in ((2, "must be in [0, 1], got 2"), ("x", "is not a number: 'x'")):
        raw = plan_input(node("h", H100, 1), [job("j", memory_bound=bad)])
        with pytest.raises(PlanInputError) as info:
            parse_plan_input(raw, catalogue)
        assert str(info.value) == f"jobs[0] 'j': 'memory_bound' {message}"
