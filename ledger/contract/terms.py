"""Lease terms and the rate card they are checked against.

The rate card (capacity rate per generation, priority premium, each site's PUE and energy
tariff) and the generation catalogue it names are ledger data shipped with the contract
(`ledger/data/`). `rate_card(stub)` is the one place the contract reads them: the version
both organisations last approved through ledger.contract.governance (kind `rate_card`: the card and
its catalogue, checked by the same loader as the deployed files), else the version deployed
with the contract. Every refusal names its rule as `[terms.<rule>]`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ledger.canonical import dumps, loads
from ledger.contract import args as args
from ledger.contract.state import ContractError
from ledger.units import MS_PER_HOUR, MS_PER_MINUTE, MW_PER_W

DATA_DIR = Path(__file__).parent.parent / "data"  # ledger/data: package data
RATE_CARD_PATH = DATA_DIR / "rate-card-v1.json"
RATE_CARD_SCHEMA = "wattlease.rate-card/1"
MAX_PLANNED_MS = 24 * 366 * MS_PER_HOUR  # a year: the web app's longest lease
# How long before its ledger record a lease may say it started: the relay's outage tolerance.
MAX_BACKDATE_MS = 24 * MS_PER_HOUR
MAX_FUTURE_MS = 5 * MS_PER_MINUTE  # a start ahead of the endorser's clock (client clock skew)
PRIORITY_LIMIT = 100
MAX_PUE_MILLI = 5000
RATE_CARD_KIND = "rate_card"  # the governance kind of a rate card both organisations approve
MAX_GENERATIONS = 256
MAX_NAME_CHARS = 200
MAX_BOARD_POWER_W = 10_000
MAX_CATALOGUE_CHARS = 48 * 1024  # within a contract argument's 64 KiB with the rate card
GOVERNED_CACHE_SIZE = 8


MAX_NVML_NAMES = 16


@dataclass(frozen=True)
class GenerationFacts:
    board_power_w: int
    precisions: frozenset[str]
    nvml_names: frozenset[str]  # the product names the driver reports for it


@dataclass(frozen=True)
class RateCard:
    version: str
    catalogue_version: str
    capacity_micro_per_gpu_hour: dict[str, int]
    priority_premium_micro_per_gpu_hour: int
    sites: dict[str, dict[str, Any]]  # code -> {name, pue_milli, tariff_micro_per_kwh}
    generations: dict[str, GenerationFacts]

    def site_code(self, name: str) -> str:
        """The code of the site an operator named `name` (the web app's Site.name)."""
        for code, site in self.sites.items():
            if site["name"] == name:
                return code
        raise KeyError(f"site {name!r} is not in rate card {self.version}")

    def capacity_rate(self, generation: str, priority: int) -> int:
        premium = self.priority_premium_micro_per_gpu_hour if priority > 0 else 0
        return self.capacity_micro_per_gpu_hour[generation] + premium


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where}: must be a non-empty object")
    return value


def _text(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME_CHARS:
        raise ValueError(f"{where}.{name}: must be a string of 1-{MAX_NAME_CHARS} characters")
    return value


def _integer(value: Any, where: str, low: int = 0, high: int = args.MAX_INT) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{where}: must be an integer in [{low}, {high}]")
    return value


def _watts(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ValueError(f"{where}: must be a number of watts")
    watts = Decimal(str(value))
    if not watts.is_finite() or not 0 < watts <= MAX_BOARD_POWER_W:
        raise ValueError(f"{where}: must be in (0, {MAX_BOARD_POWER_W}] W")
    return int(watts)


def _generations(catalogue: Any, where: str) -> tuple[str, dict[str, GenerationFacts]]:
    catalogue = _object(catalogue, where)
    entries = catalogue.get("generations")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_GENERATIONS:
        raise ValueError(f"{where}.generations: must list 1-{MAX_GENERATIONS} generations")
    generations = {}
    for i, entry in enumerate(entries):
        at = f"{where}.generations[{i}]"
        entry = _object(entry, at)
        figures = _object(entry.get("dense_tflops"), f"{at}.dense_tflops")
        names = entry.get("nvml_names")
        if not isinstance(names, list) or not 1 <= len(names) <= MAX_NVML_NAMES:
            raise ValueError(f"{at}.nvml_names: must list 1-{MAX_NVML_NAMES} names")
        generations[_text(entry, "id", at)] = GenerationFacts(
            board_power_w=_watts(entry.get("board_power_w"), f"{at}.board_power_w"),
            precisions=frozenset(figures),
            nvml_names=frozenset(_text({"name": n}, "name", f"{at}.nvml_names") for n in names),
        )
    return _text(catalogue, "version", where), generations


def _sites(value: Any, where: str) -> dict[str, dict[str, Any]]:
    sites = {}
    for code, site in _object(value, where).items():
        at = f"{where}.{code}"
        site = _object(site, at)
        sites[code] = {
            "name": _text(site, "name", at),
            "pue_milli": _integer(site.get("pue_milli"), f"{at}.pue_milli", 1000, MAX_PUE_MILLI),
            "tariff_micro_per_kwh": _integer(
                site.get("tariff_micro_per_kwh"), f"{at}.tariff_micro_per_kwh"
            ),
        }
    return sites


def _catalogue(text: Any, where: str) -> Any:
    """The catalogue file's text, parsed with its figures as Decimal (a contract argument
    carries no floats, so a proposal carries the file's text as it is)."""
    if not isinstance(text, str) or len(text) > MAX_CATALOGUE_CHARS:
        raise ValueError(f"{where}: must be the catalogue's JSON text of <= {MAX_CATALOGUE_CHARS}")
    try:
        return json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError):
        raise ValueError(f"{where}: not JSON") from None


def rate_card_of(card: Any, catalogue: Any, where: str) -> RateCard:
    """The rate card `card` with the generation catalogue it prices (`catalogue`: the JSON
    text of the catalogue file), checked: the one loader of the version deployed with the
    contract and of any version both organisations approve (ledger.contract.governance, kind
    `rate_card`). ValueError naming the field otherwise."""
    if not isinstance(card, dict) or card.get("schema") != RATE_CARD_SCHEMA:
        raise ValueError(f"{where}: not a rate card (schema {RATE_CARD_SCHEMA!r})")
    parsed = _catalogue(catalogue, f"{where}.catalogue")
    catalogue_version, generations = _generations(parsed, f"{where}.catalogue")
    field = f"{where}.capacity_micro_per_gpu_hour"
    rates = {
        gen: _integer(rate, f"{field}.{gen}")
        for gen, rate in _object(card.get("capacity_micro_per_gpu_hour"), field).items()
    }
    unknown = sorted(set(rates) - set(generations))
    if unknown:
        raise ValueError(f"{where}: rates for generations not in the catalogue: {unknown}")
    premium = "priority_premium_micro_per_gpu_hour"
    return RateCard(
        version=_text(card, "version", where),
        catalogue_version=catalogue_version,
        capacity_micro_per_gpu_hour=rates,
        priority_premium_micro_per_gpu_hour=_integer(card.get(premium), f"{where}.{premium}"),
        sites=_sites(card.get("sites"), f"{where}.sites"),
        generations=generations,
    )


def reported_generation_mismatches(
    card: RateCard, gpus: list[dict[str, str]], inventory: list[dict[str, str]]
) -> list[str]:
    """Each registered GPU ({uuid, generation}) whose generation is not what the node
    reported for it ({uuid, name, ...}: the NVML product name, under the enrolment quote):
    the catalogue lists the names the driver reports for each generation."""
    reported = {g["uuid"]: g["name"] for g in inventory}
    problems = []
    for gpu in gpus:
        facts = card.generations.get(gpu["generation"])
        name = reported.get(gpu["uuid"])
        if facts is None:
            problems.append(f"{gpu['uuid']}: generation {gpu['generation']!r} is not in the "
                            f"catalogue {card.catalogue_version}")  # fmt: skip
        elif name not in facts.nvml_names:
            problems.append(
                f"{gpu['uuid']}: the node reported {name!r}, which is not a "
                f"{gpu['generation']} (the driver names it {sorted(facts.nvml_names)})"
            )
    return problems


def load_rate_card(path: Path = RATE_CARD_PATH) -> RateCard:
    """A rate card file and the catalogue it names (beside it)."""
    card = json.loads(path.read_text())
    if card.get("schema") != RATE_CARD_SCHEMA:
        raise ValueError(f"{path}: not a rate card (schema {RATE_CARD_SCHEMA!r})")
    return rate_card_of(card, (path.parent / card["catalogue"]).read_text(), str(path))


DEPLOYED = load_rate_card()


@functools.lru_cache(maxsize=GOVERNED_CACHE_SIZE)
def _governed(document: bytes) -> RateCard:
    """A version both organisations approved (parsed once per process and version)."""
    approved = loads(document)
    return rate_card_of(approved.get("rate_card"), approved.get("catalogue"), "rate_card policy")


def approved_rate_card(document: dict[str, Any]) -> RateCard:
    """The rate card of an approved `rate_card` policy document ({rate_card, catalogue}), as
    the contract reads it (for a client that fetched it with GetPolicy)."""
    return _governed(dumps(document))


async def rate_card(stub: Any) -> RateCard:
    """The rate card in force for this transaction: the version both organisations last
    approved (governance kind `rate_card`), else the version deployed with the contract."""
    from ledger.contract.governance import (
        approved_policy,  # (governance validates with rate_card_of)
    )

    approved = await approved_policy(stub, RATE_CARD_KIND)
    return DEPLOYED if approved is None else _governed(dumps(approved))


def parse_terms(req: dict[str, Any], field: str = "terms") -> dict[str, Any]:
    """The terms object of CreateLease/MigrateLease, shape-checked (values checked later
    against the rate card by `check_terms`)."""
    raw = req.get(field)
    if not isinstance(raw, dict):
        raise args.ArgumentError(f"{field}: must be an object of lease terms")

    def num(name: str, low: int, high: int) -> int:
        return args.integer({f"{field}.{name}": raw.get(name)}, f"{field}.{name}", low, high)

    def ident(name: str) -> str:
        return args.identifier({f"{field}.{name}": raw.get(name)}, f"{field}.{name}")

    power = raw.get("attributed_power_mw")
    where = f"{field}.attributed_power_mw"
    if not isinstance(power, dict) or not 1 <= len(power) <= args.MAX_LIST_ITEMS:
        raise args.ArgumentError(f"{where}: must map each GPU uuid to milliwatts")
    return {
        "generation": ident("generation"),
        "precision": ident("precision"),
        "site": ident("site"),
        "priority": num("priority", -PRIORITY_LIMIT, PRIORITY_LIMIT),
        "start_ms": num("start_ms", 0, args.MAX_INT),
        "planned_ms": num("planned_ms", 1, MAX_PLANNED_MS),
        "pue_milli": num("pue_milli", 1000, MAX_PUE_MILLI),
        "tariff_micro_per_kwh": num("tariff_micro_per_kwh", 0, args.MAX_INT),
        "capacity_micro_per_gpu_hour": num("capacity_micro_per_gpu_hour", 0, args.MAX_INT),
        "attributed_power_mw": {
            args.identifier({where: uuid}, where): args.integer(
                {f"{where}.{uuid}": mw}, f"{where}.{uuid}", 1, args.MAX_INT
            )
            for uuid, mw in sorted(power.items())
        },
    }


def check_terms(
    terms: dict[str, Any], gpus: list[dict[str, str]], card: RateCard, now_ms: int
) -> dict[str, Any]:
    """Refuse terms the rate card and catalogue do not allow for these (on-ledger) GPUs;
    return them stamped with the rate card and catalogue versions."""
    gen = terms["generation"]
    facts = card.generations.get(gen)
    if facts is None:
        raise ContractError(
            f"[terms.generation] {gen} is not in catalogue {card.catalogue_version}"
        )
    others = sorted(g["uuid"] for g in gpus if g["generation"] != gen)
    if others:
        raise ContractError(f"[terms.generation] GPUs {others} are not {gen}")
    if terms["precision"] not in facts.precisions:
        raise ContractError(f"[terms.precision] {gen} has no dense {terms['precision']} figure")
    if sorted(terms["attributed_power_mw"]) != sorted(g["uuid"] for g in gpus):
        raise ContractError("[terms.gpus] attributed_power_mw must name exactly the lease's GPUs")
    board_mw = facts.board_power_w * MW_PER_W
    over = {u: mw for u, mw in terms["attributed_power_mw"].items() if mw > board_mw}
    if over:
        raise ContractError(
            f"[terms.power] attributed power {over} mW exceeds {gen}'s board power {board_mw} mW"
        )
    site = card.sites.get(terms["site"])
    if site is None:
        raise ContractError(f"[terms.site] site {terms['site']} is not in rate card {card.version}")
    for name in ("pue_milli", "tariff_micro_per_kwh"):
        if terms[name] != site[name]:
            raise ContractError(
                f"[terms.tariff] {name} {terms[name]} is not site {terms['site']}'s "
                f"{site[name]} (rate card {card.version})"
            )
    if gen not in card.capacity_micro_per_gpu_hour:
        raise ContractError(f"[terms.rate] rate card {card.version} has no rate for {gen}")
    rate = card.capacity_rate(gen, terms["priority"])
    if terms["capacity_micro_per_gpu_hour"] != rate:
        raise ContractError(
            f"[terms.rate] capacity_micro_per_gpu_hour {terms['capacity_micro_per_gpu_hour']} is "
            f"not the rate card's {rate} for {gen} at priority {terms['priority']}"
        )
    if not now_ms - MAX_BACKDATE_MS <= terms["start_ms"] <= now_ms + MAX_FUTURE_MS:
        raise ContractError(
            f"[terms.start] start_ms {terms['start_ms']} is not within "
            f"[{now_ms - MAX_BACKDATE_MS}, {now_ms + MAX_FUTURE_MS}] of the ledger's clock"
        )
    return {**terms, "rate_card": card.version, "catalogue": card.catalogue_version}
