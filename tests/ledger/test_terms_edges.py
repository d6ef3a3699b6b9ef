"""Each rule of the lease terms and the rate card (ledger.contract.terms) at its edge, and each
refusal's whole message: what mutation testing found the contract tests left open (a bound
one past the edge, a rule no story broke, a refusal whose text no test read). No TPM: the
terms are checked before any quote is, so these call the functions the contract calls."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.contract import args
from ledger.contract.terms import (
    DEPLOYED,
    MAX_BACKDATE_MS,
    MAX_BOARD_POWER_W,
    MAX_CATALOGUE_CHARS,
    MAX_FUTURE_MS,
    MAX_GENERATIONS,
    MAX_NAME_CHARS,
    MAX_NVML_NAMES,
    MAX_PLANNED_MS,
    MAX_PUE_MILLI,
    RATE_CARD_PATH,
    GenerationFacts,
    approved_rate_card,
    check_terms,
    load_rate_card,
    parse_terms,
    rate_card_of,
    reported_generation_mismatches,
)
from tests.ledger.helpers import refusal

CARD = json.loads(RATE_CARD_PATH.read_text())
CATALOGUE_TEXT = (RATE_CARD_PATH.parent / CARD["catalogue"]).read_text()
CATALOGUE = json.loads(CATALOGUE_TEXT)
GEN = "A100-SXM4-80GB"
BOARD_MW = DEPLOYED.generations[GEN].board_power_w * 1000
RATE = CARD["capacity_micro_per_gpu_hour"][GEN]
PREMIUM = CARD["priority_premium_micro_per_gpu_hour"]
NOW_MS = 1_800_000_000_000
GPUS = [{"uuid": "GPU-b", "generation": GEN}, {"uuid": "GPU-a", "generation": GEN}]


def raw_terms(**changes: Any) -> dict[str, Any]:
    terms = {
        "generation": GEN,
        "precision": "FP16",
        "site": "fra-1",
        "priority": 0,
        "start_ms": NOW_MS,
        "planned_ms": 3_600_000,
        "pue_milli": 1120,
        "tariff_micro_per_kwh": 210_000,
        "capacity_micro_per_gpu_hour": RATE,
        "attributed_power_mw": {"GPU-b": 300_000, "GPU-a": 250_000},
    }
    return {**terms, **changes}


# -- parse_terms: the shape of CreateLease's and MigrateLease's terms --


def test_well_formed_terms_parse_to_themselves_with_the_gpus_in_order():
    parsed = parse_terms({"terms": raw_terms()})
    assert parsed == raw_terms()
    assert list(parsed["attributed_power_mw"]) == ["GPU-a", "GPU-b"]
    assert parse_terms({"to": raw_terms()}, "to") == raw_terms()


@pytest.mark.parametrize("value", [None, [], "terms", 3])
def test_terms_that_are_not_an_object_are_refused_under_their_field(value):
    assert refusal(parse_terms, {"terms": value}) == (
        "[args.invalid] terms: must be an object of lease terms"
    )
    assert refusal(parse_terms, {"new_terms": value}, "new_terms") == (
        "[args.invalid] new_terms: must be an object of lease terms"
    )
    assert refusal(parse_terms, {}) == "[args.invalid] terms: must be an object of lease terms"


NUMBERS = [
    ("priority", -100, 100),
    ("start_ms", 0, args.MAX_INT),
    ("planned_ms", 1, MAX_PLANNED_MS),
    ("pue_milli", 1000, MAX_PUE_MILLI),
    ("tariff_micro_per_kwh", 0, args.MAX_INT),
    ("capacity_micro_per_gpu_hour", 0, args.MAX_INT),
]


@pytest.mark.parametrize(("name", "low", "high"), NUMBERS)
def test_each_number_is_taken_at_its_bounds_and_refused_past_them(name, low, high):
    for value in (low, high):
        assert parse_terms({"t": raw_terms(**{name: value})}, "t")[name] == value
    for value in (low - 1, high + 1, str(low), None):
        assert refusal(parse_terms, {"t": raw_terms(**{name: value})}, "t") == (
            f"[args.invalid] t.{name}: must be an integer in [{low}, {high}], got {value!r}"
        )


@pytest.mark.parametrize("name", ["generation", "precision", "site"])
def test_each_name_must_be_an_identifier(name):
    assert refusal(parse_terms, {"t": raw_terms(**{name: "no spaces"})}, "t") == (
        f"[args.invalid] t.{name}: must be an identifier of 1-128 characters "
        "[A-Za-z0-9._:@/-], got 'no spaces'"
    )
    terms = raw_terms()
    del terms[name]
    assert refusal(parse_terms, {"t": terms}, "t").startswith(f"[args.invalid] t.{name}: ")


def test_attributed_power_maps_one_to_sixty_four_gpus_to_milliwatts():
    most = {f"GPU-{i:02}": 1 for i in range(args.MAX_LIST_ITEMS)}
    assert parse_terms({"t": raw_terms(attributed_power_mw=most)}, "t")[
        "attributed_power_mw"
    ] == dict(sorted(most.items()))
    wrong = "[args.invalid] t.attributed_power_mw: must map each GPU uuid to milliwatts"
    for power in ({}, {**most, "GPU-64": 1}, [["GPU-a", 1]], None):
        assert refusal(parse_terms, {"t": raw_terms(attributed_power_mw=power)}, "t") == wrong
    power = {"GPU-a": args.MAX_INT}
    assert (
        parse_terms({"t": raw_terms(attributed_power_mw=power)}, "t")["attributed_power_mw"]
        == power
    )
    for mw in (0, args.MAX_INT + 1, 1.5):
        assert refusal(parse_terms, {"t": raw_terms(attributed_power_mw={"GPU-a": mw})}, "t") == (
            f"[args.invalid] t.attributed_power_mw.GPU-a: must be an integer in "
            f"[1, {args.MAX_INT}], got {mw!r}"
        )
    assert refusal(parse_terms, {"t": raw_terms(attributed_power_mw={"GPU a": 1})}, "t") == (
        "[args.invalid] t.attributed_power_mw: must be an identifier of 1-128 characters "
        "[A-Za-z0-9._:@/-], got 'GPU a'"
    )


# -- check_terms: the terms against the rate card, the catalogue and the ledger's GPUs --


def checked(**changes: Any) -> dict[str, Any]:
    return check_terms(raw_terms(**changes), GPUS, DEPLOYED, NOW_MS)


def test_terms_the_rate_card_allows_are_stamped_with_its_versions():
    assert checked() == {
        **raw_terms(),
        "rate_card": CARD["version"],
        "catalogue": CATALOGUE["version"],
    }


def test_a_generation_the_catalogue_lacks_or_the_gpus_are_not_is_refused():
    assert refusal(checked, generation="X1") == (
        f"[terms.generation] X1 is not in catalogue {CATALOGUE['version']}"
    )
    gpus = [*GPUS, {"uuid": "GPU-d", "generation": "L4"}, {"uuid": "GPU-c", "generation": "L4"}]
    assert refusal(check_terms, raw_terms(), gpus, DEPLOYED, NOW_MS) == (
        f"[terms.generation] GPUs ['GPU-c', 'GPU-d'] are not {GEN}"
    )


def test_a_precision_without_a_dense_figure_is_refused():
    assert "FP16" in DEPLOYED.generations[GEN].precisions
    assert refusal(checked, precision="FP4") == f"[terms.precision] {GEN} has no dense FP4 figure"


def test_the_power_must_name_exactly_the_leases_gpus_within_their_board_power():
    message = "[terms.gpus] attributed_power_mw must name exactly the lease's GPUs"
    assert refusal(checked, attributed_power_mw={"GPU-a": 1}) == message
    assert refusal(checked, attributed_power_mw={"GPU-a": 1, "GPU-b": 1, "GPU-c": 1}) == message
    assert checked(attributed_power_mw={"GPU-a": BOARD_MW, "GPU-b": 1})
    assert refusal(checked, attributed_power_mw={"GPU-a": BOARD_MW + 1, "GPU-b": 1}) == (
        f"[terms.power] attributed power {{'GPU-a': {BOARD_MW + 1}}} mW exceeds {GEN}'s "
        f"board power {BOARD_MW} mW"
    )


def test_the_site_and_its_tariff_are_the_rate_cards():
    assert refusal(checked, site="lhr-9") == (
        f"[terms.site] site lhr-9 is not in rate card {CARD['version']}"
    )
    assert refusal(checked, pue_milli=1121) == (
        f"[terms.tariff] pue_milli 1121 is not site fra-1's 1120 (rate card {CARD['version']})"
    )
    assert refusal(checked, tariff_micro_per_kwh=209_999) == (
        "[terms.tariff] tariff_micro_per_kwh 209999 is not site fra-1's 210000 "
        f"(rate card {CARD['version']})"
    )
    ams = CARD["sites"]["ams-2"]
    assert checked(site="ams-2", pue_milli=ams["pue_milli"],
                   tariff_micro_per_kwh=ams["tariff_micro_per_kwh"])  # fmt: skip


def test_the_capacity_rate_is_the_cards_with_the_premium_above_priority_zero():
    assert checked(priority=-100)["capacity_micro_per_gpu_hour"] == RATE
    assert checked(priority=1, capacity_micro_per_gpu_hour=RATE + PREMIUM)
    assert refusal(checked, priority=1) == (
        f"[terms.rate] capacity_micro_per_gpu_hour {RATE} is not the rate card's "
        f"{RATE + PREMIUM} for {GEN} at priority 1"
    )
    assert refusal(checked, priority=0, capacity_micro_per_gpu_hour=RATE + PREMIUM) == (
        f"[terms.rate] capacity_micro_per_gpu_hour {RATE + PREMIUM} is not the rate card's "
        f"{RATE} for {GEN} at priority 0"
    )
    rates = {g: r for g, r in DEPLOYED.capacity_micro_per_gpu_hour.items() if g != GEN}
    unpriced = dataclasses.replace(DEPLOYED, capacity_micro_per_gpu_hour=rates)
    assert refusal(check_terms, raw_terms(), GPUS, unpriced, NOW_MS) == (
        f"[terms.rate] rate card {CARD['version']} has no rate for {GEN}"
    )


def test_a_start_is_within_the_backdating_allowance_and_the_clock_skew():
    earliest, latest = NOW_MS - MAX_BACKDATE_MS, NOW_MS + MAX_FUTURE_MS
    assert checked(start_ms=earliest) and checked(start_ms=latest)
    for start in (earliest - 1, latest + 1):
        assert refusal(checked, start_ms=start) == (
            f"[terms.start] start_ms {start} is not within [{earliest}, {latest}] of the "
            "ledger's clock"
        )


# -- the rate card's own lookups --


def test_a_site_code_is_found_by_the_operators_name():
    assert DEPLOYED.site_code("ams-2 (air cooled)") == "ams-2"
    assert refusal(DEPLOYED.site_code, "ams-2") == (
        f"site 'ams-2' is not in rate card {CARD['version']}"
    )
    assert DEPLOYED.capacity_rate(GEN, 0) == RATE
    assert DEPLOYED.capacity_rate(GEN, 1) == RATE + PREMIUM
    assert DEPLOYED.capacity_rate(GEN, -1) == RATE


def test_each_gpu_the_node_reported_as_another_generation_is_named():
    name = sorted(DEPLOYED.generations[GEN].nvml_names)[0]
    inventory = [{"uuid": "GPU-a", "name": name}, {"uuid": "GPU-b", "name": "NVIDIA L4"}]
    gpus = [*GPUS, {"uuid": "GPU-c", "generation": "X1"}]
    assert reported_generation_mismatches(DEPLOYED, GPUS[1:], inventory) == []
    assert reported_generation_mismatches(DEPLOYED, gpus, inventory) == [
        f"GPU-b: the node reported 'NVIDIA L4', which is not a {GEN} (the driver names it "
        f"{sorted(DEPLOYED.generations[GEN].nvml_names)})",
        f"GPU-c: generation 'X1' is not in the catalogue {CATALOGUE['version']}",
    ]
    missing = reported_generation_mismatches(DEPLOYED, GPUS[:1], inventory[:1])
    assert missing == [
        f"GPU-b: the node reported None, which is not a {GEN} (the driver names it "
        f"{sorted(DEPLOYED.generations[GEN].nvml_names)})"
    ]


# -- the rate card loader, at each bound --


def card_of(card: dict[str, Any] | None = None, catalogue: Any = None) -> Any:
    return rate_card_of(
        CARD if card is None else card,
        json.dumps(CATALOGUE if catalogue is None else catalogue),
        "rc",
    )


def with_generation(**changes: Any) -> dict[str, Any]:
    first = {**CATALOGUE["generations"][0], **changes}
    return {**CATALOGUE, "generations": [first, *CATALOGUE["generations"][1:]]}


def test_the_deployed_card_reads_with_its_facts():
    v100 = CATALOGUE["generations"][0]
    assert DEPLOYED.version == CARD["version"]
    assert DEPLOYED.catalogue_version == CATALOGUE["version"]
    assert DEPLOYED.priority_premium_micro_per_gpu_hour == PREMIUM
    assert DEPLOYED.capacity_micro_per_gpu_hour == CARD["capacity_micro_per_gpu_hour"]
    assert DEPLOYED.sites == {
        code: {k: site[k] for k in ("name", "pue_milli", "tariff_micro_per_kwh")}
        for code, site in CARD["sites"].items()
    }
    assert DEPLOYED.generations[v100["id"]] == GenerationFacts(
        board_power_w=v100["board_power_w"],
        precisions=frozenset(v100["dense_tflops"]),
        nvml_names=frozenset(v100["nvml_names"]),
    )
    assert card_of() == DEPLOYED


def test_a_document_that_is_not_a_rate_card_is_named():
    for card in ({**CARD, "schema": "wattlease.rate-card/2"}, [CARD], None):
        assert refusal(rate_card_of, card, CATALOGUE_TEXT, "rc") == (
            "rc: not a rate card (schema 'wattlease.rate-card/1')"
        )


def test_the_catalogue_is_json_text_within_its_size():
    message = f"rc.catalogue: must be the catalogue's JSON text of <= {MAX_CATALOGUE_CHARS}"
    assert refusal(rate_card_of, CARD, CATALOGUE, "rc") == message
    padded = CATALOGUE_TEXT + " " * (MAX_CATALOGUE_CHARS - len(CATALOGUE_TEXT))
    assert rate_card_of(CARD, padded, "rc") == DEPLOYED
    assert refusal(rate_card_of, CARD, padded + " ", "rc") == message
    assert (
        refusal(rate_card_of, CARD, CATALOGUE_TEXT.rstrip()[:-1], "rc") == "rc.catalogue: not JSON"
    )
    assert refusal(rate_card_of, CARD, "[" * 30_000, "rc") == "rc.catalogue: not JSON"
    assert refusal(rate_card_of, CARD, "[]", "rc") == "rc.catalogue: must be a non-empty object"


def test_the_catalogue_lists_one_to_max_generations_each_with_its_facts():
    facts = {"nvml_names": ["n"], "board_power_w": 1, "dense_tflops": {"FP16": 1}}
    many = [{"id": f"G{i}", **facts} for i in range(MAX_GENERATIONS)]
    card = {**CARD, "capacity_micro_per_gpu_hour": {"G0": 1}}
    assert len(card_of(card, {"version": "v", "generations": many}).generations) == (
        MAX_GENERATIONS
    )
    one = card_of(card, {"version": "v", "generations": many[:1]})
    assert list(one.generations) == ["G0"]
    message = f"rc.catalogue.generations: must list 1-{MAX_GENERATIONS} generations"
    for entries in ([], [*many, {"id": "G256", **facts}], {"G0": many[0]}):
        assert refusal(card_of, card, {"version": "v", "generations": entries}) == message
    assert refusal(card_of, None, with_generation(dense_tflops={})) == (
        "rc.catalogue.generations[0].dense_tflops: must be a non-empty object"
    )
    assert refusal(card_of, None, {**CATALOGUE, "generations": [[], *many[1:]]}) == (
        "rc.catalogue.generations[0]: must be a non-empty object"
    )


def test_a_generation_names_one_to_sixteen_nvml_names_of_its_own_length():
    names = [f"NVIDIA {i}" for i in range(MAX_NVML_NAMES)]
    v100 = CATALOGUE["generations"][0]["id"]
    assert card_of(None, with_generation(nvml_names=names)).generations[v100].nvml_names == set(
        names
    )
    message = f"rc.catalogue.generations[0].nvml_names: must list 1-{MAX_NVML_NAMES} names"
    for wrong in ([], [*names, "NVIDIA 16"], "NVIDIA V100"):
        assert refusal(card_of, None, with_generation(nvml_names=wrong)) == message
    assert refusal(card_of, None, with_generation(nvml_names=[""])) == (
        f"rc.catalogue.generations[0].nvml_names.name: must be a string of 1-{MAX_NAME_CHARS} "
        "characters"
    )


def test_names_are_one_to_max_name_chars_long():
    longest = "x" * MAX_NAME_CHARS
    assert card_of({**CARD, "version": longest}).version == longest
    assert card_of({**CARD, "version": "x"}).version == "x"
    message = f"rc.version: must be a string of 1-{MAX_NAME_CHARS} characters"
    for version in ("", longest + "x", 1, None):
        assert refusal(card_of, {**CARD, "version": version}) == message
    assert refusal(card_of, None, {**CATALOGUE, "version": ""}) == (
        f"rc.catalogue.version: must be a string of 1-{MAX_NAME_CHARS} characters"
    )


def test_board_power_is_a_positive_number_of_watts_up_to_the_maximum():
    v100 = CATALOGUE["generations"][0]["id"]
    for watts, kept in ((MAX_BOARD_POWER_W, MAX_BOARD_POWER_W), (0.5, 0), (250.9, 250)):
        card = card_of(None, with_generation(board_power_w=watts))
        assert card.generations[v100].board_power_w == kept
    where = "rc.catalogue.generations[0].board_power_w"
    for watts in (0, -1, MAX_BOARD_POWER_W + 0.5, 1e400):
        assert refusal(card_of, None, with_generation(board_power_w=watts)) == (
            f"{where}: must be in (0, {MAX_BOARD_POWER_W}] W"
        )
    for watts in (True, "300", None):
        assert refusal(card_of, None, with_generation(board_power_w=watts)) == (
            f"{where}: must be a number of watts"
        )
    nan = CATALOGUE_TEXT.replace('"board_power_w": 300', '"board_power_w": NaN', 1)
    assert nan != CATALOGUE_TEXT
    assert refusal(rate_card_of, CARD, nan, "rc") == f"{where}: must be in (0, 10000] W"
    exact = rate_card_of(CARD, CATALOGUE_TEXT.replace('"board_power_w": 300', '"board_power_w"'
                         ': 300.0', 1), "rc")  # fmt: skip
    assert exact.generations[v100].board_power_w == 300
    # figures are read as decimals: a float would round this one to the maximum, and peers
    # must not depend on binary rounding
    over = CATALOGUE_TEXT.replace(
        '"board_power_w": 300', f'"board_power_w": {MAX_BOARD_POWER_W}.0000000000000001', 1
    )
    assert float(f"{MAX_BOARD_POWER_W}.0000000000000001") == MAX_BOARD_POWER_W
    assert refusal(rate_card_of, CARD, over, "rc") == f"{where}: must be in (0, 10000] W"


def test_a_site_has_a_pue_from_one_to_five_and_a_tariff():
    def site(**changes: Any) -> dict[str, Any]:
        return {**CARD, "sites": {**CARD["sites"], "fra-1": {**CARD["sites"]["fra-1"], **changes}}}

    for pue in (1000, MAX_PUE_MILLI):
        assert card_of(site(pue_milli=pue)).sites["fra-1"]["pue_milli"] == pue
    for pue in (999, MAX_PUE_MILLI + 1, True, 1120.0):
        assert refusal(card_of, site(pue_milli=pue)) == (
            f"rc.sites.fra-1.pue_milli: must be an integer in [1000, {MAX_PUE_MILLI}]"
        )
    assert card_of(site(tariff_micro_per_kwh=0)).sites["fra-1"]["tariff_micro_per_kwh"] == 0
    assert card_of(site(tariff_micro_per_kwh=args.MAX_INT))
    for tariff in (-1, args.MAX_INT + 1, None):
        assert refusal(card_of, site(tariff_micro_per_kwh=tariff)) == (
            f"rc.sites.fra-1.tariff_micro_per_kwh: must be an integer in [0, {args.MAX_INT}]"
        )
    assert refusal(card_of, site(name="")) == (
        f"rc.sites.fra-1.name: must be a string of 1-{MAX_NAME_CHARS} characters"
    )
    assert refusal(card_of, {**CARD, "sites": {}}) == "rc.sites: must be a non-empty object"
    assert refusal(card_of, {**CARD, "sites": {"fra-1": 1}}) == (
        "rc.sites.fra-1: must be a non-empty object"
    )


def test_rates_are_for_generations_of_the_catalogue():
    rates = {**CARD["capacity_micro_per_gpu_hour"], "X2": 1, "X1": 2}
    assert refusal(card_of, {**CARD, "capacity_micro_per_gpu_hour": rates}) == (
        "rc: rates for generations not in the catalogue: ['X1', 'X2']"
    )
    assert refusal(card_of, {**CARD, "capacity_micro_per_gpu_hour": {GEN: -1}}) == (
        f"rc.capacity_micro_per_gpu_hour.{GEN}: must be an integer in [0, {args.MAX_INT}]"
    )
    assert refusal(card_of, {**CARD, "capacity_micro_per_gpu_hour": {}}) == (
        "rc.capacity_micro_per_gpu_hour: must be a non-empty object"
    )
    assert card_of({**CARD, "capacity_micro_per_gpu_hour": {GEN: 0}}).capacity_micro_per_gpu_hour
    assert refusal(card_of, {**CARD, "priority_premium_micro_per_gpu_hour": -1}) == (
        f"rc.priority_premium_micro_per_gpu_hour: must be an integer in [0, {args.MAX_INT}]"
    )


# -- the files deployed with the contract, and a version both organisations approved --


def test_a_rate_card_file_reads_with_the_catalogue_it_names_beside_it(tmp_path: Path):
    shutil.copy(RATE_CARD_PATH.parent / CARD["catalogue"], tmp_path / "cat.json")
    path = tmp_path / "card.json"
    path.write_text(json.dumps({**CARD, "catalogue": "cat.json"}))
    assert load_rate_card(path) == DEPLOYED
    assert load_rate_card() == DEPLOYED
    path.write_text(json.dumps({**CARD, "schema": "x"}))
    assert refusal(load_rate_card, path) == (
        f"{path}: not a rate card (schema 'wattlease.rate-card/1')"
    )
    path.write_text(json.dumps({**CARD, "catalogue": "cat.json", "version": ""}))
    assert refusal(load_rate_card, path) == (
        f"{path}.version: must be a string of 1-{MAX_NAME_CHARS} characters"
    )


def test_an_approved_version_is_read_as_the_contract_reads_it():
    document = {"rate_card": {**CARD, "version": "2027-01"}, "catalogue": CATALOGUE_TEXT}
    approved = approved_rate_card(document)
    assert approved == dataclasses.replace(DEPLOYED, version="2027-01")
    assert refusal(approved_rate_card, {"rate_card": None, "catalogue": CATALOGUE_TEXT}) == (
        "rate_card policy: not a rate card (schema 'wattlease.rate-card/1')"
    )
