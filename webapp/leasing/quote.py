"""The quote a tenant is shown, explained from the lease terms the ledger records: the two
parts of `ledger.money.Terms.quote()` and the figures behind each, read from the same Terms
object, never computed a second way (docs/billing.md, "The quote")."""

from __future__ import annotations

from typing import Any

from ledger import money


def explain(terms: dict[str, Any]) -> dict[str, int]:
    """GPUs x planned hours x capacity rate = capacity part; planned GPU energy x PUE x
    tariff = energy part; their sum is `quote_micro`, Terms.quote() exactly. Integers in the
    ledger's units (ms, mJ, thousandths, micro-units)."""
    t = money.Terms.of(terms)
    end_ms = t.start_ms + t.planned_ms
    capacity = t.capacity_until(end_ms)
    energy = t.priced_until(end_ms)
    return {
        "gpus": t.gpus,
        "planned_ms": t.planned_ms,
        "capacity_micro_per_gpu_hour": t.capacity_micro_per_gpu_hour,
        "capacity_micro": capacity,
        "planned_energy_mj": t.planned_mj(t.start_ms, end_ms),
        "pue_milli": t.pue_milli,
        "tariff_micro_per_kwh": t.tariff_micro_per_kwh,
        "energy_micro": energy,
        "quote_micro": t.quote(),
    }
