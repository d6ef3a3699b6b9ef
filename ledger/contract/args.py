"""Strict parsing of the contract's JSON arguments.

Every argument arrives from a client as an untrusted string. These helpers turn it into plain
values or raise ArgumentError naming the field and the offending value; nothing else escapes
(no KeyError/TypeError), and floats are refused outright so money can never be one.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from attest.errors import PolicyError
from attest.policy import DEFAULT_BANK, LEDGER_BANKS, PcrPolicy, pcr_index

MAX_ARG_BYTES = 64 * 1024  # one JSON argument; a quote + PCRs is ~2 KiB
MAX_LIST_ITEMS = 64  # GPUs per node/lease, attestation ids per lease
MAX_ID_LEN = 128
MAX_TEXT_LEN = 256
MAX_B64_BYTES = 4096  # TPM2B_PUBLIC / TPMS_ATTEST / TPMT_SIGNATURE are all well below this
MAX_INT = 10**18

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")
HEX_RE = re.compile(r"(?:[0-9a-f]{2})+")


REASON_ARGS = "args.invalid"  # an argument the contract cannot parse; the message names it
REASON_CODE = re.compile(r"\[[a-z][a-z0-9_.]*\]")  # chaincode_client.interface.REASON_RE


class ArgumentError(ValueError):
    """A contract argument is malformed; the message names the field and value, after its
    reason code (`[args.invalid]` unless it names a more precise one)."""

    def __init__(self, message: str) -> None:
        coded = REASON_CODE.search(message) is not None
        super().__init__(message if coded else f"[{REASON_ARGS}] {message}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_float(text: str) -> Any:
    raise ArgumentError(f"floats are not accepted (got {text}); use integers")


def _no_constant(text: str) -> Any:
    raise ArgumentError(f"{text} is not accepted")


def load_object(raw: str, what: str = "argument") -> dict[str, Any]:
    """Parse one JSON-object argument, bounded in size, without floats or NaN."""
    if not isinstance(raw, str):
        raise ArgumentError(f"{what} must be a JSON string, got {type(raw).__name__}")
    if len(raw) > MAX_ARG_BYTES:
        raise ArgumentError(f"[too_large] {what} is {len(raw)} characters, limit {MAX_ARG_BYTES}")
    try:
        value = json.loads(raw, parse_float=_no_float, parse_constant=_no_constant)
    except ArgumentError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ArgumentError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ArgumentError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def identifier(obj: dict[str, Any], field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise ArgumentError(
            f"{field}: must be an identifier of 1-{MAX_ID_LEN} characters [A-Za-z0-9._:@/-], "
            f"got {_short(value)}"
        )
    return value


def integer(obj: dict[str, Any], field: str, low: int, high: int) -> int:
    value = obj.get(field)
    if type(value) is not int or not low <= value <= high:
        raise ArgumentError(f"{field}: must be an integer in [{low}, {high}], got {_short(value)}")
    return value


def b64_length(size: int) -> int:
    """Characters of the padded base64 of `size` bytes."""
    return 4 * -(-size // 3)


def b64bytes(obj: dict[str, Any], field: str, max_bytes: int = MAX_B64_BYTES) -> bytes:
    value = obj.get(field)
    if not isinstance(value, str) or len(value) > b64_length(max_bytes):  # before decoding
        raise ArgumentError(
            f"{field}: must be base64 of at most {max_bytes} bytes "
            f"({b64_length(max_bytes)} characters), got {_short(value)}"
        )
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ArgumentError(f"{field}: not valid base64: {_short(value)}") from None
    if not decoded or len(decoded) > max_bytes:
        raise ArgumentError(f"{field}: must be 1-{max_bytes} bytes, got {len(decoded)}")
    return decoded


def hexbytes(obj: dict[str, Any], field: str, low: int, high: int) -> bytes:
    value = obj.get(field)
    wrong = ArgumentError(
        f"{field}: must be lower-case hex of {low}-{high} bytes, got {_short(value)}"
    )
    if not isinstance(value, str) or not HEX_RE.fullmatch(value):
        raise wrong
    decoded = bytes.fromhex(value)
    if not low <= len(decoded) <= high:
        raise wrong
    return decoded


def id_list(obj: dict[str, Any], field: str, min_items: int = 1) -> list[str]:
    value = obj.get(field)
    if not isinstance(value, list) or not min_items <= len(value) <= MAX_LIST_ITEMS:
        raise ArgumentError(
            f"{field}: must be a list of {min_items}-{MAX_LIST_ITEMS} identifiers, "
            f"got {_short(value)}"
        )
    items = [identifier({f"{field}[{i}]": item}, f"{field}[{i}]") for i, item in enumerate(value)]
    if len(set(items)) != len(items):
        raise ArgumentError(f"{field}: contains duplicates")
    return items


def gpu_inventory(obj: dict[str, Any], field: str = "gpus") -> list[dict[str, str]]:
    value = obj.get(field)
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_LIST_ITEMS:
        raise ArgumentError(f"{field}: must be a list of 1-{MAX_LIST_ITEMS} GPUs")
    gpus = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ArgumentError(f"{field}[{i}]: must be an object with uuid and generation")
        uuid, generation = f"{field}[{i}].uuid", f"{field}[{i}].generation"
        gpus.append(
            {
                "uuid": identifier({uuid: item.get("uuid")}, uuid),
                "generation": identifier({generation: item.get("generation")}, generation),
            }
        )
    if len({g["uuid"] for g in gpus}) != len(gpus):
        raise ArgumentError(f"{field}: duplicate GPU uuid")
    return gpus


def pcr_policy(obj: dict[str, Any], field: str = "pcr_policy") -> dict[str, Any]:
    """The node's PCR policy, inline: {"pcrs": {"sha256": {"0": hex32, ...}}, "max_age_s": N,
    "challenge_window_s": W (optional, <= max_age_s)}."""
    value = obj.get(field)
    if not isinstance(value, dict):
        raise ArgumentError(f"{field}: must be an object with pcrs and max_age_s")
    age_field = f"{field}.max_age_s"
    max_age_s = integer({age_field: value.get("max_age_s")}, age_field, 1, 366 * 24 * 3600)
    pcrs = value.get("pcrs")
    try:  # the one rule for a policy on the ledger (attest.policy): banks, indices, values
        PcrPolicy.for_ledger({"pcrs": pcrs})
    except PolicyError as exc:
        raise ArgumentError(f"{field}.pcrs: {exc}") from None
    golden: dict[str, str] = {}
    for index, digest in value["pcrs"][DEFAULT_BANK].items():  # for_ledger accepted its shape
        if not HEX_RE.fullmatch(digest):  # for_ledger took its size; the ledger's form:
            raise ArgumentError(  # lower-case hex, no 0x
                f"{field}.pcrs.{DEFAULT_BANK}[{index}]: must be lower-case hex without 0x, "
                f"got {_short(digest)}"
            )
        golden[index] = digest
    policy: dict[str, Any] = {
        "pcrs": {DEFAULT_BANK: dict(sorted(golden.items(), key=lambda kv: int(kv[0])))},
        "max_age_s": max_age_s,
    }
    if "challenge_window_s" in value:  # optional: how long an IssueChallenge nonce stays open
        window_field = f"{field}.challenge_window_s"
        policy["challenge_window_s"] = integer(
            {window_field: value["challenge_window_s"]}, window_field, 1, max_age_s
        )
    return policy


def pcr_values(obj: dict[str, Any], field: str = "pcr_values") -> dict[str, dict[int, bytes]]:
    """A quote's PCR values, {bank: {index: hex}}, in the banks the ledger records."""
    value = obj.get(field)
    if (
        not isinstance(value, dict)
        or set(value) != LEDGER_BANKS
        or not isinstance(value[DEFAULT_BANK], dict)
    ):
        raise ArgumentError(f"{field}: must be {{'{DEFAULT_BANK}': {{index: hex}}}}")
    out: dict[int, bytes] = {}
    for index, digest in value[DEFAULT_BANK].items():
        try:
            pcr = pcr_index(DEFAULT_BANK, index)
        except PolicyError as exc:
            raise ArgumentError(f"{field}.{exc}") from None
        name = f"{field}.{DEFAULT_BANK}[{index}]"
        out[pcr] = hexbytes({name: digest}, name, 32, 32)
    if not out:
        raise ArgumentError(f"{field}.{DEFAULT_BANK}: must not be empty")
    return {DEFAULT_BANK: out}
