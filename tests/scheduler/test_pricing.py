from __future__ import annotations

from decimal import Decimal as D

import pytest

from scheduler.pricing import (
    MJ_PER_KWH,
    GpuCondition,
    Pricer,
    PricingError,
    PricingPolicy,
    kwh_to_mj,
)


def cond(gen: str, gpu: str = "g0", pue: str = "1", tariff: str = "0.10", **kw) -> GpuCondition:
    return GpuCondition(gpu, gen, D(pue), D(tariff), **kw)


def test_watts_per_tflops_are_the_datasheet_figures_not_the_seeds(catalogue):
    wpt = {g: catalogue.get(g).watts_per_tflops("FP16") for g in catalogue.generations}
    assert round(wpt["V100-SXM2"], 2) == D("2.40")  # seed said 2.00 (250 W is the PCIe TDP)
    assert round(wpt["A100-SXM4-80GB"], 2) == D("1.28")
    assert round(wpt["L40S"], 2) == D("0.97")  # seed said 1.82 from a 192 TFLOPS figure
    assert round(wpt["H100-SXM5-80GB"], 2) == D("0.71")  # 989.4 dense, not 1979 sparse


def test_coefficient_is_baseline_over_generation(catalogue):
    pricer = Pricer(catalogue)
    assert pricer.coefficient("V100-SXM2", "FP16") == 1
    assert round(pricer.coefficient("A100-SXM4-80GB", "FP16"), 3) == D("1.872")
    assert round(pricer.coefficient("L40S", "FP16"), 2) == D("2.48")
    assert round(pricer.coefficient("H100-SXM5-80GB", "FP16"), 2) == D("3.39")


def test_baseline_is_configurable(catalogue):
    pricer = Pricer(catalogue, PricingPolicy(baseline="A100-SXM4-80GB"))
    assert pricer.coefficient("A100-SXM4-80GB", "BF16") == 1
    assert pricer.coefficient("V100-SXM2", "FP16") < 1


def test_precision_the_baseline_lacks_uses_its_fp16_reference(catalogue):
    pricer = Pricer(catalogue)
    assert pricer.baseline_tflops("BF16") == catalogue.get("V100-SXM2").dense_tflops["FP16"]
    assert pricer.baseline_tflops("FP32") == D("15.7")
    assert pricer.baseline_tflops("INT8") == D(125)


def test_fp64_tensor_work_is_counted_in_baseline_fp64_hours(catalogue):
    pricer = Pricer(catalogue)
    assert pricer.baseline_tflops("FP64_TENSOR") == pricer.baseline_tflops("FP64") == D("7.8")
    a100 = pricer.price("FP64_TENSOR", 1, D(10), [cond("A100-SXM4-80GB")])
    assert a100.lines[0].gpu_hours == D(4)  # 10 x 7.8 / 19.5
    with pytest.raises(PricingError, match="V100-SXM2 has no dense FP64_TENSOR"):
        pricer.price("FP64_TENSOR", 1, D(1), [cond("V100-SXM2")])


def test_faster_generation_needs_fewer_gpu_hours_for_the_same_work(catalogue):
    pricer = Pricer(catalogue)
    v100 = pricer.price("FP16", 1, D(10), [cond("V100-SXM2")])
    h100 = pricer.price("FP16", 1, D(10), [cond("H100-SXM5-80GB")])
    assert v100.lines[0].gpu_hours == D(10)
    assert h100.lines[0].gpu_hours < D("1.27")
    assert h100.work_tflops_h == v100.work_tflops_h == D(1250)
    assert h100.total < v100.total


def test_price_reconciles_line_by_line(catalogue):
    pricer = Pricer(catalogue)
    price = pricer.price(
        "BF16",
        2,
        D(8),
        [cond("A100-SXM4-80GB", "a", pue="1.3"), cond("A100-SXM4-80GB", "b", pue="1.3")],
    )
    assert price.total == sum(line.cost for line in price.lines)
    expected = price.baseline_energy_kwh / price.coefficient * price.pue * D("0.10")
    assert abs(price.total - expected) < D("0.001")
    # mJ come from the unrounded energy; the displayed kWh is rounded to 1 mWh = 3.6e6 mJ
    assert abs(price.energy_attributed_mj - kwh_to_mj(price.energy_kwh)) <= 1_800_000


def test_temperature_above_threshold_derates_and_below_does_not(catalogue):
    pricer = Pricer(catalogue)
    assert pricer.derating(D(80)) == 1
    assert pricer.derating(None) == 1
    assert pricer.derating(D(85)) == D("1.05")
    assert pricer.derating(D(150)) == D("1.5")  # capped: a stuck sensor is not 8x the cost
    cool = pricer.price("FP16", 1, D(5), [cond("L40S", temp_c=D(60))])
    hot = pricer.price("FP16", 1, D(5), [cond("L40S", temp_c=D(90))])
    assert hot.derating == D("1.1000") and hot.total > cool.total


def test_measured_power_replaces_datasheet_power(catalogue):
    pricer = Pricer(catalogue)
    price = pricer.price("FP16", 1, D(5), [cond("H100-SXM5-80GB", power_w=D(500))])
    line = price.lines[0]
    assert line.power_source == "measured"
    assert line.attributed_power_w == D(500)
    assert line.w_per_tflops == round(D(500) / D("989.4"), 4)


def test_pue_scales_facility_energy(catalogue):
    pricer = Pricer(catalogue)
    one = pricer.price("FP16", 1, D(5), [cond("L40S", pue="1.0")])
    more = pricer.price("FP16", 1, D(5), [cond("L40S", pue="1.5")])
    assert more.facility_energy_kwh == round(one.facility_energy_kwh * D("1.5"), 6)


def test_unsupported_precision_and_unknown_generation_are_named(catalogue):
    pricer = Pricer(catalogue)
    with pytest.raises(PricingError, match="V100-SXM2 has no dense FP8"):
        pricer.price("FP8", 1, D(1), [cond("V100-SXM2")])
    with pytest.raises(PricingError, match="unknown generation 'B200'"):
        pricer.price("FP16", 1, D(1), [cond("B200")])
    with pytest.raises(PricingError, match="offered 1 GPUs"):
        pricer.price("FP16", 2, D(1), [cond("L40S")])


def test_energy_meets_the_ledger_in_integer_millijoules():
    assert kwh_to_mj(D(1)) == MJ_PER_KWH == 3_600_000_000
    assert isinstance(kwh_to_mj(D("0.0000000001")), int)
