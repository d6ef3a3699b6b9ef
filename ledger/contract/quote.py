"""Adapter from the contract to the quote verifier in `attest/`.

The contract stores plain JSON; the verifier speaks bytes and dataclasses. This module is the
one place that converts between the two, so the contract stays readable and the verifier's API
can evolve in one spot.
"""

from __future__ import annotations

from typing import Any


class VerifierUnavailable(RuntimeError):
    """The attest package is missing: the peer cannot verify quotes, so it must not endorse."""


def check_registration(ak_public: bytes, policy: dict[str, Any]) -> None:
    """Refuse, at RegisterNode, an AK that does not parse as TPM2B_PUBLIC or a PCR policy the
    verifier would not accept, instead of failing every later attestation."""
    try:
        from attest.errors import AttestError
        from attest.policy import PcrPolicy
        from attest.public import parse_public
    except ImportError as exc:
        raise VerifierUnavailable(f"quote verifier not available: {exc}") from None
    try:
        parse_public(ak_public)
    except AttestError as exc:
        raise ValueError(f"ak_public: {exc}") from None
    try:
        PcrPolicy.from_json({"pcrs": policy["pcrs"]})
    except AttestError as exc:
        raise ValueError(f"pcr_policy: {exc}") from None


def verify(
    ak_public: bytes,
    quote: bytes,
    signature: bytes,
    pcr_values: dict[str, dict[int, bytes]],
    nonce: bytes,
    policy: dict[str, Any],
    previous_clock: dict[str, Any] | None,
) -> dict[str, Any]:
    """Re-run the quote verification; returns the verdict as a JSON-ready dict with at least
    `valid` (bool), `reasons` (list) and `clock` (dict or None, for the next check)."""
    try:
        from attest.policy import PcrPolicy
        from attest.verifier import ClockInfo, verify_quote
    except ImportError as exc:  # never endorse an attestation nobody checked
        raise VerifierUnavailable(f"quote verifier not available: {exc}") from None
    pcr_policy = PcrPolicy.from_json({"pcrs": policy["pcrs"]})
    clock = ClockInfo.from_dict(previous_clock) if previous_clock else None
    verdict = verify_quote(
        ak_public=ak_public,
        quote=quote,
        signature=signature,
        pcr_values=pcr_values,
        nonce=nonce,
        policy=pcr_policy,
        previous_clock=clock,
    )
    result = verdict.to_dict()
    result["valid"] = bool(verdict.valid)
    clock_info = getattr(verdict, "clock", None)
    result["clock"] = clock_info.to_dict() if clock_info is not None else None
    return result
