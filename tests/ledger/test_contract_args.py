"""Property tests: arbitrary JSON or bytes as contract arguments → a clean rejection or a
well-formed answer, never a crash, a hang or a stack trace in the message."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaincode_client.interface import EndorsementError
from ledger.contract import args as args
from ledger.contract import bill_line, billing
from ledger.contract import terms as lease_terms
from tests.ledger.conftest import embedded_backend

FUNCTIONS = [
    "RegisterNode",
    "RevokeAK",
    "RecordAttestation",
    "CreateLease",
    "EndLease",
    "MigrateLease",
    "Settle",
    "GetNode",
    "GetLease",
    "GetAttestation",
    "LeasesByTenant",
    "LeasesByNode",
    "GetSettlements",
    "GetHistory",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "node_id",
        "org",
        "ak_public",
        "gpus",
        "pcr_policy",
        "lease_id",
        "tenant",
        "terms",
        "start_ms",
        "end_ms",
        "final",
        "capacity_micro",
        "total_micro",
        "attestation_ids",
        "quote",
        "nonce",
        "signature",
        "pcr_values",
        "interval_seq",
        "measured_mj",
        "priced_energy_micro",
        "measured_energy_micro",
        "settlement_micro",
        "pue_milli",
        "capacity_micro_per_gpu_hour",
        "tariff_micro_per_kwh",
        "telemetry_digest",
        "key",
        "reason",
    ]
)
requests = st.dictionaries(field_names, json_values, max_size=10).map(json.dumps)
garbage = st.text(max_size=200) | st.binary(max_size=200).map(
    lambda b: b.decode("utf-8", "replace")
)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with embedded_backend(tmp_path_factory.mktemp("fuzz")) as env:
        yield env


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fn=st.sampled_from(FUNCTIONS), request=requests | garbage)
def test_arbitrary_arguments_are_rejected_cleanly(embedded, fn, request):
    client = embedded.clients["Org1MSP"]
    try:
        client.submit(fn, request)
    except EndorsementError as exc:
        message = str(exc)
        assert message and "Traceback" not in message
        assert not message.startswith(("KeyError", "IndexError", "TypeError"))
    else:  # only a well-formed request may pass, e.g. RegisterNode with valid fields
        assert isinstance(json.loads(request), dict)


@given(st.text(max_size=300))
def test_load_object_never_raises_anything_but_argument_error(text):
    try:
        value = args.load_object(text)
    except args.ArgumentError:
        return
    assert isinstance(value, dict)


@given(json_values)
def test_validators_raise_only_argument_error(value):
    checks = [
        lambda o: args.identifier(o, "f"),
        lambda o: args.integer(o, "f", 0, args.MAX_INT),
        lambda o: args.b64bytes(o, "f"),
        lambda o: args.hexbytes(o, "f", 1, 64),
        lambda o: args.id_list(o, "f"),
        lambda o: args.gpu_inventory(o, "f"),
        lambda o: args.pcr_policy(o, "f"),
        lambda o: args.pcr_values(o, "f"),
        lambda o: lease_terms.parse_terms(o, "f"),
    ]
    for check in checks:
        try:
            check({"f": value})
        except args.ArgumentError as exc:
            assert "f" in str(exc)


term_fields = st.sampled_from(
    [
        "generation",
        "precision",
        "site",
        "priority",
        "start_ms",
        "planned_ms",
        "pue_milli",
        "tariff_micro_per_kwh",
        "capacity_micro_per_gpu_hour",
        "attributed_power_mw",
    ]
)
settle_fields = st.sampled_from(bill_line.SETTLE_ARGS)


@given(st.dictionaries(term_fields, json_values | st.integers(), max_size=12))
def test_lease_terms_parser_raises_only_argument_error_naming_the_field(terms):
    try:
        parsed = lease_terms.parse_terms({"terms": terms})
    except args.ArgumentError as exc:
        assert str(exc).removeprefix("[args.invalid] ").startswith("terms")
        return
    assert set(parsed) == set(terms)


@given(st.dictionaries(settle_fields, json_values | st.integers(), max_size=16))
def test_settle_parser_raises_only_argument_error(request):
    try:
        parsed = billing.parse_request(request)
    except args.ArgumentError:
        return
    assert parsed["final"] in (True, False) and len(parsed["telemetry_digest"]) == 64


def test_deeply_nested_json_is_refused_not_crashing():
    with pytest.raises(args.ArgumentError):
        args.load_object("[" * 50_000 + "]" * 50_000)


def test_clock_skew_bound_comes_from_the_environment_and_refuses_bad_values():
    from ledger.contract.state import DEFAULT_MAX_CLOCK_SKEW_S, _max_clock_skew_s

    assert _max_clock_skew_s({}) == DEFAULT_MAX_CLOCK_SKEW_S
    assert _max_clock_skew_s({"LEDGER_MAX_CLOCK_SKEW_S": "30"}) == 30
    for bad in ("0", "-5", "2.5", "soon"):
        with pytest.raises(ValueError, match=f"LEDGER_MAX_CLOCK_SKEW_S='{bad}': must be"):
            _max_clock_skew_s({"LEDGER_MAX_CLOCK_SKEW_S": bad})
