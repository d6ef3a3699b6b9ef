"""The pricing inputs the web app hands the scheduler: which reading is a measured draw, and
the hours a moving lease has left."""

from __future__ import annotations

from decimal import Decimal as D

from ledger.units import MS_PER_HOUR
from scheduler.inputs import LOADED_UTIL_PCT, measured_power_w, remaining_hours


def test_only_a_reading_under_load_is_a_measured_draw():
    assert measured_power_w(LOADED_UTIL_PCT, 312_500) == D("312.5")
    assert measured_power_w(LOADED_UTIL_PCT - 1, 312_500) is None  # idle: says nothing
    assert measured_power_w(100, 0) is None  # no reading


def test_remaining_hours_is_the_share_not_run_to_the_hundredth():
    planned = 4 * MS_PER_HOUR
    assert remaining_hours(D(4), MS_PER_HOUR, planned) == D("3.00")
    assert remaining_hours(D(4), MS_PER_HOUR // 3, planned) == D("3.67")  # 3.666... rounds
    assert remaining_hours(D(4), 0, planned) == D("4.00")


def test_a_lease_past_its_plan_still_prices_the_least_step():
    assert remaining_hours(D(2), 5 * MS_PER_HOUR, 2 * MS_PER_HOUR) == D("0.01")
    assert remaining_hours(D(2), 0, 0) == D("0.01")
