"""The rate card loader (ledger.contract.terms.rate_card_of) reads documents an organisation's admin
proposes: whatever JSON they hold, it answers with a rate card or a ValueError naming the
field, never another exception."""

from __future__ import annotations

import copy
import json
from contextlib import suppress
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.contract.terms import DEPLOYED, RATE_CARD_PATH, rate_card_of

CARD = json.loads(RATE_CARD_PATH.read_text())
CATALOGUE_TEXT = (RATE_CARD_PATH.parent / CARD["catalogue"]).read_text()
CATALOGUE = json.loads(CATALOGUE_TEXT)
EXAMPLES = 300

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def test_reads_the_deployed_files_as_load_rate_card_does():
    assert rate_card_of(CARD, CATALOGUE_TEXT, "card") == DEPLOYED


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    where=st.sampled_from(["card", "site", "catalogue", "generation"]),
    field=st.sampled_from(
        [
            "schema",
            "version",
            "capacity_micro_per_gpu_hour",
            "priority_premium_micro_per_gpu_hour",
            "sites",
            "name",
            "pue_milli",
            "tariff_micro_per_kwh",
            "generations",
            "id",
            "board_power_w",
            "dense_tflops",
            "nvml_names",
        ]
    ),
    value=json_values,
)
def test_any_json_in_a_field_gives_a_rate_card_or_a_value_error(where, field, value: Any):
    card, catalogue = copy.deepcopy(CARD), copy.deepcopy(CATALOGUE)
    target = {
        "card": card,
        "site": card["sites"]["fra-1"],
        "catalogue": catalogue,
        "generation": catalogue["generations"][0],
    }[where]
    target[field] = value
    try:
        rate_card_of(card, json.dumps(catalogue), "document")
    except ValueError as exc:
        assert str(exc).startswith("document")


@settings(max_examples=EXAMPLES, deadline=None)
@given(card=json_values, catalogue=json_values | st.text(max_size=64))
def test_any_json_document_gives_a_rate_card_or_a_value_error(card, catalogue):
    with suppress(ValueError):
        rate_card_of({**CARD, "x": card}, catalogue, "document")
    with suppress(ValueError):
        rate_card_of(card, CATALOGUE_TEXT, "document")
