"""Fuzzing the new parsers of untrusted contract arguments: policy documents, EK bindings,
GPU inventories. Every input ends in ArgumentError (naming the field) or a clean value."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest.inventory import inventory_digest
from ledger.contract import args as args
from ledger.contract import ek_binding, governance

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(["uuid", "name", "serial", "x"]) | st.text(max_size=6), inner, max_size=4
    ),
    max_leaves=12,
)
documents = st.dictionaries(
    st.sampled_from(["certificates", "pcrs", "max_age_s", "challenge_window_s", "x"]),
    json_values,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(governance.VALIDATORS)), documents)
def test_policy_documents_parse_or_raise_argument_error(kind, document):
    try:
        parsed = governance.document_of({"document": document}, kind)
    except args.ArgumentError:
        return
    assert isinstance(parsed, dict)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_inventories_parse_or_raise_argument_error(items):
    try:
        inventory = ek_binding._inventory_of({"inventory": items})
        inventory_digest("n1", inventory)
    except (args.ArgumentError, ValueError):
        return
    assert [g["uuid"] for g in inventory] == sorted(g["uuid"] for g in inventory)


fields = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(fields, fields, fields), min_size=1, max_size=4, unique_by=lambda t: t[0]),
    st.integers(0, 3),
    st.sampled_from(["uuid", "name", "serial"]),
    fields,
)
def test_any_changed_inventory_field_changes_the_digest(rows, index, field, value):
    gpus = [{"uuid": u, "name": n, "serial": s} for u, n, s in rows]
    changed = [dict(g) for g in gpus]
    target = changed[index % len(changed)]
    if target[field] == value or (field == "uuid" and value in {g["uuid"] for g in gpus}):
        return
    target[field] = value
    assert inventory_digest("n1", changed) != inventory_digest("n1", gpus)


def test_inventory_fields_with_nul_or_lone_surrogates_are_refused():
    with pytest.raises(ValueError, match="serial"):
        inventory_digest("n1", [{"uuid": "GPU-a", "name": "x", "serial": "1\x002"}])
    with pytest.raises(ValueError, match="name: not valid Unicode"):
        inventory_digest("n1", [{"uuid": "GPU-a", "name": "\ud800", "serial": ""}])


statements = (
    st.fixed_dictionaries(
        {
            "ak_certificate": st.dictionaries(
                st.sampled_from(["org", "node_id", "ak_name", "ek_name", "activated_ns", "x"]),
                json_values,
                max_size=6,
            )
            | json_values,
            "signature": json_values,
        }
    )
    | json_values
)


@settings(max_examples=300, deadline=None)
@given(statements)
def test_ak_certificates_parse_or_raise_argument_error(entry):
    """One organisation's entry of ek_binding.ak_certificates (its registrar's statement and
    signature): an ArgumentError naming the field, or the statement and signature bytes."""
    try:
        statement, signature = ek_binding._ak_certificate_of(entry, "Org1MSP")
    except args.ArgumentError as exc:
        assert "ek_binding.ak_certificates.Org1MSP" in str(exc) or "signature" in str(exc)
        return
    assert isinstance(signature, bytes) and type(statement["activated_ns"]) is int
    assert all(isinstance(statement[f], str) for f in ("org", "node_id", "ak_name", "ek_name"))
