"""The attested-telemetry arguments (RecordAttestation's `telemetry`, Settle's
`telemetry_batches`) are untrusted bytes: any input parses to well-formed values or raises an
ArgumentError naming the field, never anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.contract import args as args
from ledger.contract import attested_telemetry as at

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
DIGEST = st.binary(min_size=32, max_size=32).map(bytes.hex)


@given(JSONISH)
def test_telemetry_parses_or_names_the_field(value):
    try:
        parsed = at.parse_telemetry({"telemetry": value})
    except args.ArgumentError as exc:
        assert "telemetry" in str(exc) or str(exc).split(":")[0]
        return
    assert all(len(bytes.fromhex(d)) == 32 for d in parsed.values())


@given(st.dictionaries(st.from_regex(r"GPU-[a-z0-9]{1,8}", fullmatch=True), DIGEST, max_size=8))
def test_well_formed_telemetry_round_trips(value):
    assert at.parse_telemetry({"telemetry": value}) == value


@given(JSONISH)
def test_batches_parse_or_name_the_field(value):
    try:
        parsed = at.parse_batches({"telemetry_batches": value})
    except args.ArgumentError as exc:
        message = str(exc).removeprefix("[args.invalid] ")
        assert message.startswith(("telemetry_batches", "gpu", "digest", "rows"))
        return
    assert all(b.rows >= 1 for b in parsed)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([{"gpu": "GPU-a", "digest": "ab" * 32}], r"telemetry_batches\[0\]: must be an object"),
        ([{"gpu": "GPU-a", "digest": "ab", "rows": 1}], "digest: must be lower-case hex"),
        ([{"gpu": "GPU-a", "digest": "ab" * 32, "rows": 0}], "rows: must be an integer"),
        ([{"gpu": "GPU-a", "digest": "ab" * 32, "rows": 1}] * 2, "cited twice"),
        ([{"gpu": "GPU-a", "digest": "ab" * 32, "rows": 1}] * 300, "at most 256"),
    ],
)
def test_malformed_batches_are_refused_naming_the_rule(value, message):
    with pytest.raises(args.ArgumentError, match=message):
        at.parse_batches({"telemetry_batches": value})
