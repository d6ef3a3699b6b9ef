"""Fuzzing the engine's parsers of untrusted bytes: proposals from clients, envelopes and
receipts read back from files. Every input ends in a clean, named rejection."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.audit.receipt import verify_receipt
from ledger.engine.endorser import ProposalRejected, _parse_proposal
from ledger.engine.tx import decode_envelope

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=15,
)
keys = st.sampled_from(
    [
        "proposal",
        "signature",
        "response",
        "endorsements",
        "fn",
        "args",
        "creator",
        "timestamp",
        "tx_id",
        "nonce",
        "channel",
        "chaincode",
        "config",
        "headers",
        "transactions",
        "genesis_envelope",
        "rwset",
        "reads",
        "writes",
        "ranges",
    ]
)
shaped = st.dictionaries(
    keys, json_values | st.dictionaries(keys, json_values, max_size=4), max_size=8
)
raw = st.binary(max_size=300) | shaped.map(lambda d: json.dumps(d).encode())


@settings(max_examples=150, deadline=None)
@given(raw)
def test_proposal_parser_rejects_cleanly(data):
    try:
        _parse_proposal(data, "wattlease")
    except ProposalRejected as exc:
        assert str(exc)


@settings(max_examples=150, deadline=None)
@given(raw)
def test_envelope_decoder_raises_only_value_error(data):
    with pytest.raises(ValueError, match="malformed envelope"):
        decode_envelope(data)


@settings(max_examples=150, deadline=None)
@given(shaped)
def test_receipt_verifier_reports_instead_of_crashing(doc):
    problems = verify_receipt(doc, {})
    assert problems and all(isinstance(p, str) for p in problems)
