"""The attested-telemetry arguments (RecordAttestation's `readings`, Settle's
`telemetry_batches`) are untrusted bytes: any input parses to well-formed values or raises an
ArgumentError naming the field, never anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attest import readings
from ledger.contract import args as args
from ledger.contract import attested_telemetry as at
from ledger.contract import bill_line

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
DIGEST = st.binary(min_size=32, max_size=32).map(bytes.hex)


@given(JSONISH)
def test_readings_parse_or_name_the_field(value):
    try:
        parsed = at.parse_readings({"readings": value})
    except args.ArgumentError as exc:
        assert str(exc).startswith("[args.invalid] readings")
        return
    assert all(rows and all(r.gpu == gpu for r in rows) for gpu, rows in parsed.items())


READING = st.tuples(st.integers(0, 10**6), st.integers(0, 10**12))


@given(
    st.dictionaries(
        st.from_regex(r"GPU-[a-z0-9]{1,8}", fullmatch=True),
        st.lists(READING, min_size=1, max_size=6, unique_by=lambda r: r[0]),
        max_size=8,
    )
)
def test_well_formed_readings_round_trip_to_their_digests(value):
    """The contract derives each GPU's batch digest from its rows, as the node agent does."""
    texts = {
        gpu: "".join(f"{t},{gpu},{mj},0,0,0,0\n" for t, mj in points)
        for gpu, points in value.items()
    }
    parsed = at.parse_readings({"readings": texts})
    expected = readings.gpu_digests(r for text in texts.values() for r in readings.parse_rows(text))
    assert at.digests(parsed) == expected


@given(JSONISH)
def test_batches_parse_or_name_the_field(value):
    try:
        parsed = bill_line.parse_batches({"telemetry_batches": value})
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
        bill_line.parse_batches({"telemetry_batches": value})
