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
from tests.ledger.helpers import refusal

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


# -- each refusal of `readings` and of a node's telemetry, at its edge and whole --


def rows_of(gpu: str, length: int) -> str:
    """Canonical rows of `gpu`, `length` characters in all: the last two rows' counters
    take as many digits (1-18 each) as it needs to land on it exactly."""
    text, t = "", 0

    def row(t_ms: int, counter: str) -> str:
        return f"{t_ms},{gpu},{counter},0,0,0,0\n"

    while length - len(text) > len(row(t, "")) + len(row(t + 1000, "")) + 30:
        text, t = text + row(t, str(t)), t + 1000
    digits = length - len(text) - len(row(t, "")) - len(row(t + 1000, ""))
    return text + row(t, "1" * (digits // 2)) + row(t + 1000, "2" * (digits - digits // 2))


def test_digests_alone_are_refused_saying_what_to_send():
    assert refusal(at.parse_readings, {"telemetry": {"GPU-a": "ab" * 32}}) == (
        "[args.invalid] telemetry: batch digests alone are not accepted; send readings "
        "{gpu: rows}, whose digests and energy counters every endorser derives"
    )


def test_readings_of_as_many_gpus_as_a_node_may_hold_and_no_more():
    most = {f"GPU-{i}": f"0,GPU-{i},1,0,0,0,0\n" for i in range(args.MAX_LIST_ITEMS)}
    assert len(at.parse_readings({"readings": most})) == args.MAX_LIST_ITEMS
    most["GPU-x"] = "0,GPU-x,1,0,0,0,0\n"
    assert refusal(at.parse_readings, {"readings": most}) == (
        f"[args.invalid] readings: must be an object of at most {args.MAX_LIST_ITEMS} GPUs, "
        "got dict"
    )
    assert refusal(at.parse_readings, {"readings": ["0,GPU-a,1,0,0,0,0\n"]}).endswith(
        "at most 64 GPUs, got list"
    )


def test_a_gpus_rows_are_one_to_the_limits_characters():
    limit = readings.MAX_QUOTED_READINGS_CHARS
    longest = rows_of("GPU-a", limit)
    assert len(longest) == limit
    assert len(at.parse_readings({"readings": {"GPU-a": longest}})["GPU-a"]) > 1
    too_long = "0" + longest  # the first row's time gains a leading digit
    expected = f"[args.invalid] readings['GPU-a']: must be CSV rows of 1-{limit} characters"
    assert refusal(at.parse_readings, {"readings": {"GPU-a": too_long}}) == expected
    assert refusal(at.parse_readings, {"readings": {"GPU-a": ""}}) == expected
    # one character is within the length: what is wrong with it is its row
    assert refusal(at.parse_readings, {"readings": {"GPU-a": "\n"}}) == (
        "[args.invalid] readings['GPU-a']: line 1: expected 7 fields, got 1"
    )


def test_telemetry_of_a_gpu_not_the_nodes_is_refused_naming_it():
    node = {"node_id": "n1", "gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}]}
    at.check_node_gpus(node, {"GPU-a": "x", "GPU-b": "y"})
    assert refusal(at.check_node_gpus, node, {"GPU-a": "x", "GPU-z": "y", "GPU-c": "z"}) == (
        "[attest.telemetry_gpu] node n1 reports telemetry of ['GPU-c', 'GPU-z'], which are not "
        "its GPUs on the ledger"
    )


def test_a_gpus_rows_are_its_own_and_agree_at_every_instant():
    assert refusal(at.parse_readings, {"readings": {"GPU-a": "0,GPU-b,1,0,0,0,0\n"}}) == (
        "[args.invalid] readings['GPU-a']: holds rows of GPUs ['GPU-b'], not GPU-a"
    )
    both = "0,GPU-a,1,0,0,0,0\n0,GPU-b,1,0,0,0,0\n"
    assert refusal(at.parse_readings, {"readings": {"GPU-a": both}}) == (
        "[args.invalid] readings['GPU-a']: holds rows of GPUs ['GPU-a', 'GPU-b'], not GPU-a"
    )
    twice = "1000,GPU-a,5,0,0,0,0\n1000,GPU-a,9,0,0,0,0\n"
    assert refusal(at.parse_readings, {"readings": {"GPU-a": twice}}) == (
        "[args.invalid] readings['GPU-a']: GPU GPU-a: two readings at t_ms 1000 disagree"
    )
    same = "1000,GPU-a,5,0,0,0,0\n1000,GPU-a,5,0,0,0,0\n"  # read twice, agreeing
    assert len(at.parse_readings({"readings": {"GPU-a": same}})["GPU-a"]) == 2
