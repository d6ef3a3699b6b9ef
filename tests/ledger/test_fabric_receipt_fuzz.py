"""Property tests: untrusted receipt bytes never crash the Fabric receipt verifier. Whatever a
block, an envelope, the receipt's JSON or the roots file holds, the parsers raise only their
own format errors and `verify_fabric_receipt` returns defects."""

from __future__ import annotations

import base64
import copy
import functools
from contextlib import suppress
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.audit.fabric_block import BlockFormatError, parse_block, parse_endorser_tx
from ledger.audit.fabric_receipt import verify_fabric_receipt
from ledger.audit.fabric_trust import RootsError, parse_roots
from tests.ledger.fabric_stories import Story, lease_story

EXAMPLES = 300


@functools.cache
def story() -> Story:
    return lease_story()


def mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None, extra: bytes) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        out[position % len(out)] = value
    if cut is not None:
        out = out[: cut % (len(out) + 1)]
    return bytes(out) + extra


mutations = st.tuples(
    st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), max_size=8),
    st.none() | st.integers(0, 2**20),
    st.binary(max_size=16),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_index=st.integers(0, 3), mutation=mutations)
def test_a_mutated_block_gives_defects_never_a_crash(block_index, mutation):
    doc = copy.deepcopy(story().receipt)
    entry = doc["blocks"][block_index]
    raw = mutate(base64.b64decode(entry["block"]), *mutation)
    with suppress(BlockFormatError):
        for envelope in parse_block(raw).envelopes:
            with suppress(BlockFormatError):
                parse_endorser_tx(envelope)
    entry["block"] = base64.b64encode(raw).decode()
    defects = verify_fabric_receipt(doc, story().roots)
    assert isinstance(defects, list) and all(isinstance(d, str) for d in defects)


@settings(max_examples=EXAMPLES, deadline=None)
@given(mutation=mutations)
def test_a_mutated_envelope_raises_only_a_format_error(mutation):
    envelope = parse_block(base64.b64decode(story().receipt["blocks"][2]["block"])).envelopes[0]
    with suppress(BlockFormatError):
        parse_endorser_tx(mutate(envelope, *mutation))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    where=st.sampled_from(["receipt", "blocks", "transactions"]),
    field=st.sampled_from(
        ["blocks", "transactions", "lease_id", "channel", "format", "number", "block", "index"]
    ),
    value=json_values,
)
def test_any_json_in_a_receipt_field_gives_defects(where, field, value: Any):
    doc = copy.deepcopy(story().receipt)
    target = doc if where == "receipt" else doc[where][0]
    target[field] = value
    defects = verify_fabric_receipt(doc, story().roots)
    assert isinstance(defects, list) and all(isinstance(d, str) for d in defects)


@settings(max_examples=EXAMPLES, deadline=None)
@given(edits=mutations)
def test_a_mutated_roots_file_raises_only_a_roots_error(edits):
    with suppress(RootsError):
        parse_roots(mutate(story().roots, *edits))
