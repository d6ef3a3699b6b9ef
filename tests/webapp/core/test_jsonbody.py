"""Property tests for the untrusted-JSON reader every API body goes through."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webapp.core.api.jsonbody import MAX_JSON_DEPTH, JsonRefused, check_value, loads_bounded

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=30,
)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(values)
def test_any_json_within_the_depth_reads_back_unchanged(value):
    assert depth(value) <= MAX_JSON_DEPTH
    assert loads_bounded(json.dumps(value).encode()) == value


@given(st.binary(max_size=200))
def test_any_bytes_give_a_value_or_a_named_refusal(raw):
    try:
        loads_bounded(raw)
    except JsonRefused as refused:
        assert refused.code.startswith("json.")


@given(st.integers(MAX_JSON_DEPTH + 1, 200_000), st.sampled_from(["[", '{"k":']))
def test_nesting_past_the_limit_is_refused_by_depth(levels, opener):
    closer = "]" if opener == "[" else "}"
    raw = (opener * levels + "0" * (opener != "[") + closer * levels).encode()
    with pytest.raises(JsonRefused) as refused:
        loads_bounded(raw)
    assert refused.value.code == "json.depth"


@given(st.integers(0xD800, 0xDFFF), st.booleans())
def test_lone_surrogates_are_refused_in_keys_and_values(point, in_key):
    escaped = f'"\\u{point:04x}"'
    raw = (f"{{{escaped}: 1}}" if in_key else f'{{"k": [{escaped}]}}').encode()
    with pytest.raises(JsonRefused) as refused:
        loads_bounded(raw)
    assert refused.value.code == "json.surrogate"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_refused(constant):
    with pytest.raises(JsonRefused, match=r"\[json.constant\]"):
        loads_bounded(f'{{"hours": {constant}}}'.encode())


def test_depth_is_counted_by_containers():
    check_value([[0]], max_depth=2)
    with pytest.raises(JsonRefused, match="deeper than 1"):
        check_value({"a": [0]}, max_depth=1)
