"""The calls the web app makes, in one place. Thin: each delegates to the module that owns
the decision (pricing, placement, settlement, telemetry, advice)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ledger.contract.terms import RateCard
from scheduler.advice import (
    HourTotals,
    PoolState,
    ScalingAdvice,
    WindowTotals,
    advise_pools,
    advise_pools_from_totals,
    heatmap_from_hours,
    hour_totals,
    idle_heatmap,
    queueing_symptom,
)
from scheduler.catalogue import Catalogue, load_catalogue
from scheduler.fleet import PlanInput, PlanInputError, parse_plan_input
from scheduler.placement import Placement, Plan, plan
from scheduler.pricing import COMPUTE_BOUND, GpuCondition, PriceBreakdown, Pricer, PricingPolicy
from scheduler.settlement import (
    AttestedBatch,
    IntervalSettlement,
    lease_terms,
    settle,
    settle_lines,
)
from scheduler.telemetry.replay import ReplaySource, load_trace, write_trace
from scheduler.telemetry.source import ChosenSource, open_telemetry
from scheduler.telemetry.synthetic import synthetic_fleet, synthetic_trace

__all__ = [
    "AttestedBatch",
    "ChosenSource",
    "GpuCondition",
    "HourTotals",
    "IntervalSettlement",
    "Placement",
    "PoolState",
    "ReplaySource",
    "ScalingAdvice",
    "WindowTotals",
    "advise_pools",
    "advise_pools_from_totals",
    "heatmap_from_hours",
    "hour_totals",
    "idle_heatmap",
    "lease_terms",
    "load_trace",
    "open_telemetry",
    "plan_batch",
    "price_lease",
    "queueing_symptom",
    "settle",
    "settle_lines",
    "synthetic_fleet",
    "synthetic_trace",
    "write_trace",
]


def price_lease(
    precision: str,
    gpus: list[GpuCondition],
    hours: Decimal,
    catalogue: Catalogue | None = None,
    policy: PricingPolicy | None = None,
    memory_bound: Decimal = COMPUTE_BOUND,
) -> PriceBreakdown:
    """Price `hours` baseline hours of work on these GPUs (one GpuCondition per GPU), for a
    job memory-bound for the fraction `memory_bound` of its baseline runtime."""
    catalogue = catalogue or load_catalogue()
    return Pricer(catalogue, policy).price(precision, len(gpus), hours, gpus, memory_bound)


def plan_batch(
    data: dict[str, Any],
    catalogue: Catalogue | None = None,
    policy: PricingPolicy | None = None,
    card: RateCard | None = None,
) -> Plan:
    """Validate a plan input (the CLI's JSON schema, decoded) and place it. With a rate card
    (the input's site ids are its site codes) each placement carries its lease terms and
    their quote, and the plan ranks by that quote's two parts. Raises fleet.PlanInputError
    naming the bad entry."""
    catalogue = catalogue or load_catalogue()
    data_in = parse_plan_input(data, catalogue)
    if card is not None:
        _check_priced(data_in, card)
    return plan(data_in, catalogue, policy, card)


def _check_priced(data: PlanInput, card: RateCard) -> None:
    """Every site and attested generation of the input is on the rate card."""
    for site in data.sites:
        if site not in card.sites:
            raise PlanInputError(f"site {site!r} is not on rate card {card.version}")
    for gpu in data.gpus:
        if gpu.attested and gpu.generation not in card.capacity_micro_per_gpu_hour:
            raise PlanInputError(
                f"GPU {gpu.id!r}: rate card {card.version} prices no {gpu.generation!r}"
            )
