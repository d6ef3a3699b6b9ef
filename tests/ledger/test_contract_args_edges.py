"""The contract's argument parsers (ledger.contract.args) at each edge: the bounds taken
exactly, one past them refused, each refusal's whole message. Every case is one a mutant of
the parser let through the contract and fuzz tests (docs/threat-model.md, "Mutation
testing"); pure functions, no swtpm, so the CI mutation sample can run them."""

from __future__ import annotations

import base64
import json

import pytest

from ledger.contract import args
from ledger.contract.args import ArgumentError

DIGEST = "ab" * 32


def refused(call, *a, **kw) -> str:
    with pytest.raises(ArgumentError) as info:
        call(*a, **kw)
    return str(info.value)


# -- one JSON object --------------------------------------------------------------------


def test_an_argument_must_be_a_json_string_of_an_object():
    assert refused(args.load_object, 5) == "[args.invalid] argument must be a JSON string, got int"
    assert refused(args.load_object, "[1]", "lease") == (
        "[args.invalid] lease must be a JSON object, got list"
    )
    assert refused(args.load_object, "{").startswith("[args.invalid] argument is not valid JSON")


def test_an_argument_of_the_size_limit_is_read_and_one_character_more_is_not():
    pad = args.MAX_ARG_BYTES - len('{"a":""}')
    assert args.load_object('{"a":"' + "x" * pad + '"}') == {"a": "x" * pad}
    bigger = '{"a":"' + "x" * (pad + 1) + '"}'
    assert refused(args.load_object, bigger) == (
        f"[too_large] argument is {args.MAX_ARG_BYTES + 1} characters, limit {args.MAX_ARG_BYTES}"
    )


def test_floats_and_non_numbers_are_refused():
    assert refused(args.load_object, '{"kwh": 1.5}') == (
        "[args.invalid] floats are not accepted (got 1.5); use integers"
    )
    assert refused(args.load_object, '{"kwh": 1e3}') == (
        "[args.invalid] floats are not accepted (got 1e3); use integers"
    )
    for constant in ("NaN", "Infinity", "-Infinity"):
        text = '{"kwh": ' + constant + "}"
        assert refused(args.load_object, text) == f"[args.invalid] {constant} is not accepted"


# -- scalars ------------------------------------------------------------------------------


def test_a_value_in_a_message_is_cut_after_60_characters():
    assert args._short("x" * 58) == repr("x" * 58)  # 60 with its quotes
    assert args._short("x" * 59) == repr("x" * 59)[:57] + "..."
    assert refused(args.identifier, {"id": "x" * 200}, "id").endswith(f"got '{'x' * 56}...")


def test_an_identifier_is_1_to_128_characters_of_its_alphabet():
    assert args.identifier({"id": "n1.a:b@c/d-e_f"}, "id") == "n1.a:b@c/d-e_f"
    for wrong in ("bad id", "-lead", "", "x" * 129, 7, None):
        assert refused(args.identifier, {"id": wrong}, "id") == (
            "[args.invalid] id: must be an identifier of 1-128 characters [A-Za-z0-9._:@/-], "
            f"got {args._short(wrong)}"
        )


def test_an_integer_takes_both_bounds_and_nothing_past_them():
    assert args.integer({"n": 5}, "n", 1, 5) == 5
    assert args.integer({"n": 1}, "n", 1, 5) == 1
    assert refused(args.integer, {"n": 6}, "n", 1, 5) == (
        "[args.invalid] n: must be an integer in [1, 5], got 6"
    )
    assert refused(args.integer, {"n": True}, "n", 0, 5) == (
        "[args.invalid] n: must be an integer in [0, 5], got True"
    )


def test_base64_of_the_limit_is_read_and_more_is_not():
    for size in (3, 4, 5):  # a whole group, and the two padded ones
        exact = base64.b64encode(b"x" * size).decode()
        assert args.b64bytes({"k": exact}, "k", size) == b"x" * size
        over = base64.b64encode(b"x" * (size + 1)).decode()
        limit = args.b64_length(size)
        if len(over) > limit:
            assert refused(args.b64bytes, {"k": over}, "k", size) == (
                f"[args.invalid] k: must be base64 of at most {size} bytes ({limit} "
                f"characters), got {args._short(over)}"
            )
        else:
            assert refused(args.b64bytes, {"k": over}, "k", size) == (
                f"[args.invalid] k: must be 1-{size} bytes, got {size + 1}"
            )
    assert [args.b64_length(n) for n in (1, 2, 3, 4, 6, 7)] == [4, 4, 4, 8, 8, 12]


def test_base64_must_be_strictly_the_alphabet_and_not_empty():
    for loose in ("QUJD\n", "QU JD", "QUJD!"):
        assert refused(args.b64bytes, {"k": loose}, "k") == (
            f"[args.invalid] k: not valid base64: {loose!r}"
        )
    assert refused(args.b64bytes, {"k": ""}, "k", 8) == "[args.invalid] k: must be 1-8 bytes, got 0"


def test_hex_of_the_bounds_is_read_in_lower_case_only():
    assert args.hexbytes({"h": "00" * 16}, "h", 16, 32) == bytes(16)
    assert args.hexbytes({"h": "ff" * 32}, "h", 16, 32) == b"\xff" * 32
    for wrong in ("00" * 15, "00" * 33, "AB" * 16, "0x" + "00" * 16, "abc", 7):
        assert refused(args.hexbytes, {"h": wrong}, "h", 16, 32) == (
            f"[args.invalid] h: must be lower-case hex of 16-32 bytes, got {args._short(wrong)}"
        )


# -- lists ----------------------------------------------------------------------------------


def test_an_id_list_takes_up_to_its_limit_without_duplicates():
    most = [f"id{i}" for i in range(args.MAX_LIST_ITEMS)]
    assert args.id_list({"ids": most}, "ids") == most
    assert refused(args.id_list, {"ids": [*most, "one-more"]}, "ids").startswith(
        f"[args.invalid] ids: must be a list of 1-{args.MAX_LIST_ITEMS} identifiers, got "
    )
    assert args.id_list({"ids": ["a", "b"]}, "ids", min_items=2) == ["a", "b"]
    assert refused(args.id_list, {"ids": ["a"]}, "ids", min_items=2) == (
        f"[args.invalid] ids: must be a list of 2-{args.MAX_LIST_ITEMS} identifiers, got ['a']"
    )
    assert refused(args.id_list, {"ids": ["a", "b", "a"]}, "ids") == (
        "[args.invalid] ids: contains duplicates"
    )


def test_a_gpu_inventory_takes_one_to_the_limit_without_a_uuid_twice():
    def gpus(n: int) -> list[dict[str, str]]:
        return [{"uuid": f"GPU-{i}", "generation": "H100"} for i in range(n)]

    assert args.gpu_inventory({"gpus": gpus(1)}) == gpus(1)
    assert args.gpu_inventory({"gpus": gpus(args.MAX_LIST_ITEMS)}) == gpus(args.MAX_LIST_ITEMS)
    for n in (0, args.MAX_LIST_ITEMS + 1):
        assert refused(args.gpu_inventory, {"gpus": gpus(n)}) == (
            f"[args.invalid] gpus: must be a list of 1-{args.MAX_LIST_ITEMS} GPUs"
        )
    assert refused(args.gpu_inventory, {"gpus": [*gpus(1), "GPU-9"]}) == (
        "[args.invalid] gpus[1]: must be an object with uuid and generation"
    )
    assert refused(args.gpu_inventory, {"gpus": gpus(2) + gpus(1)}) == (
        "[args.invalid] gpus: duplicate GPU uuid"
    )


# -- a PCR policy and a quote's PCR values -------------------------------------------------

YEAR_S = 366 * 24 * 3600


def policy(**extra) -> dict:
    return {"pcr_policy": {"pcrs": {"sha256": {"0": DIGEST}}, "max_age_s": 60, **extra}}


def test_a_policy_keeps_its_values_in_numeric_pcr_order():
    doc = {"pcrs": {"sha256": {"10": "0a" * 32, "2": "02" * 32, "0": DIGEST}}, "max_age_s": 60}
    parsed = args.pcr_policy({"pcr_policy": doc})
    assert json.dumps(parsed["pcrs"]) == json.dumps(
        {"sha256": {"0": DIGEST, "2": "02" * 32, "10": "0a" * 32}}
    )
    assert parsed == {"pcrs": {"sha256": {"0": DIGEST, "2": "02" * 32, "10": "0a" * 32}},
                      "max_age_s": 60}  # fmt: skip


def test_a_policy_must_be_an_object():
    for wrong in (None, [], "policy"):
        assert refused(args.pcr_policy, {"pcr_policy": wrong}) == (
            "[args.invalid] pcr_policy: must be an object with pcrs and max_age_s"
        )


def test_a_policy_age_from_one_second_to_a_leap_year():
    for age in (1, YEAR_S):
        doc = policy(max_age_s=age)
        assert args.pcr_policy(doc)["max_age_s"] == age
    for age in (0, YEAR_S + 1):
        assert refused(args.pcr_policy, policy(max_age_s=age)) == (
            f"[args.invalid] pcr_policy.max_age_s: must be an integer in [1, {YEAR_S}], got {age}"
        )


def test_a_policy_challenge_window_is_kept_and_bounded_by_its_age():
    assert "challenge_window_s" not in args.pcr_policy(policy())
    for window in (1, 60):
        assert args.pcr_policy(policy(challenge_window_s=window))["challenge_window_s"] == window
    for window in (0, 61, "30"):
        assert refused(args.pcr_policy, policy(challenge_window_s=window)) == (
            "[args.invalid] pcr_policy.challenge_window_s: must be an integer in [1, 60], "
            f"got {window!r}"
        )


def test_a_policy_value_must_be_in_the_ledgers_canonical_form():
    for loose in (DIGEST.upper(), "0x" + DIGEST):
        doc = {"pcr_policy": {"pcrs": {"sha256": {"7": loose}}, "max_age_s": 60}}
        assert refused(args.pcr_policy, doc) == (
            "[args.invalid] pcr_policy.pcrs.sha256[7]: must be lower-case hex without 0x, "
            f"got {args._short(loose)}"
        )
    short = {"pcr_policy": {"pcrs": {"sha256": {"7": "ab"}}, "max_age_s": 60}}
    assert refused(args.pcr_policy, short) == (
        "[args.invalid] pcr_policy.pcrs: sha256:7: golden value is 1 bytes, want 32"
    )


def test_pcr_values_are_32_byte_sha256_digests_by_index():
    assert args.pcr_values({"pcr_values": {"sha256": {"7": DIGEST}}}) == {
        "sha256": {7: bytes.fromhex(DIGEST)}
    }
    for wrong in ("ab" * 31, "ab" * 33):
        assert refused(args.pcr_values, {"pcr_values": {"sha256": {"7": wrong}}}) == (
            "[args.invalid] pcr_values.sha256[7]: must be lower-case hex of 32-32 bytes, "
            f"got {args._short(wrong)}"
        )
    assert refused(args.pcr_values, {"pcr_values": {"sha256": {"07": DIGEST}}}) == (
        "[args.invalid] pcr_values.sha256: PCR index '07' is not a decimal integer"
    )
    shape = "[args.invalid] pcr_values: must be {'sha256': {index: hex}}"
    for wrong in (None, {"sha1": {"7": DIGEST}}, {"sha256": [DIGEST]}, {"sha256": "7"}):
        assert refused(args.pcr_values, {"pcr_values": wrong}) == shape, wrong
    both = {"sha256": {"7": DIGEST}, "sha1": {"7": "ab" * 20}}
    assert refused(args.pcr_values, {"pcr_values": both}) == shape
    assert refused(args.pcr_values, {"pcr_values": {"sha256": {}}}) == (
        "[args.invalid] pcr_values.sha256: must not be empty"
    )
