"""Quote verification in a fixed order (as Keylime's tpm_util does), pure `cryptography`.

AK attributes → signature scheme vs key → hash algorithm → signature over TPMS_ATTEST →
magic and type → nonce == extraData → PCR selection covers the policy's → PCR digest == H(values) →
values == golden → the clock policy against the last recorded quote (attest.clock). Structural
failures (unparseable evidence, a bad signature) stop the run: nothing after them is
authenticated.
"""

from __future__ import annotations

import hmac
from functools import lru_cache
from typing import Any, NamedTuple, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from attest import clock as clock_policy
from attest import tpm_constants as C
from attest.errors import MalformedEvidence, PolicyError
from attest.pcrfile import PcrValues
from attest.policy import DEFAULT_SELECTION, PcrPolicy
from attest.public import PublicArea, parse_public
from attest.structs import Attest, Signature, parse_attest, parse_signature
from attest.verdict import SEVERITY_INFO, SEVERITY_WARNING, ClockInfo, Reason, Verdict

__all__ = ["ClockInfo", "PcrPolicy", "Reason", "Verdict", "verify_quote"]

ACCEPTED_QUOTE_HASHES = (C.ALG_SHA256, C.ALG_SHA384, C.ALG_SHA512)  # SHA-1 is not accepted
MAX_NONCE_BYTES = 64  # extraData is a TPM2B_DATA no larger than a digest
MIN_NONCE_BYTES = 8  # shorter nonces are guessable enough to pre-compute quotes
PEM_PREFIX = b"-----BEGIN"

DEFAULT_POLICY = PcrPolicy.default()
DEFAULT_POLICY_REASON = Reason(
    "policy_default",
    f"no PCR policy: default selection {DEFAULT_SELECTION}, golden values not checked",
    SEVERITY_INFO,
)
NO_GOLDEN_REASON = Reason(
    "no_golden_values", "policy has no golden values: PCR contents not checked", SEVERITY_INFO
)
ECDSA_BY_HASH = {alg: ec.ECDSA(C.HASH_ALGS[alg]()) for alg in ACCEPTED_QUOTE_HASHES}
AnyKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class LoadedAk(NamedTuple):
    area: PublicArea | None  # None for a bare PEM key: attributes unknown
    key: AnyKey
    is_ecc: bool
    name: bytes | None
    attribute_reasons: tuple[Reason, ...]  # computed once per AK: attributes never change


@lru_cache(maxsize=256)
def _load_ak(ak_public: bytes) -> LoadedAk:
    """Parse the AK once per distinct byte string; the chaincode verifies the same AK often."""
    if ak_public.lstrip().startswith(PEM_PREFIX):
        try:
            key = serialization.load_pem_public_key(ak_public)
        except (ValueError, TypeError) as exc:
            raise MalformedEvidence("AK PEM", 0, f"not a PEM public key: {exc}") from None
        if not isinstance(key, AnyKey):
            raise MalformedEvidence("AK PEM", 0, f"unsupported key type {type(key).__name__}")
        return LoadedAk(None, key, isinstance(key, ec.EllipticCurvePublicKey), None, ())
    area = parse_public(ak_public)
    key = area.public_key()
    is_ecc = isinstance(key, ec.EllipticCurvePublicKey)
    return LoadedAk(area, key, is_ecc, area.name(), _attribute_reasons(area))


def _attribute_reasons(area: PublicArea) -> tuple[Reason, ...]:
    """Why this AK's attributes make it unfit to sign quotes (empty when fit)."""
    missing = [
        name
        for name, bit in (
            ("restricted", C.ATTR_RESTRICTED),
            ("sign", C.ATTR_SIGN),
            ("fixedTPM", C.ATTR_FIXED_TPM),
            ("fixedParent", C.ATTR_FIXED_PARENT),
        )
        if not area.has_attributes(bit)
    ]
    reasons = []
    if missing:
        reasons.append(
            Reason(
                "ak_not_restricted_signing_key",
                f"AK attributes {area.attributes:#010x} lack {', '.join(missing)}: a key that "
                "can sign arbitrary data could forge TPMS_ATTEST, so its quotes prove nothing",
            )
        )
    if area.has_attributes(C.ATTR_DECRYPT):
        reasons.append(Reason("ak_not_restricted_signing_key", "AK is also a decryption key"))
    return tuple(reasons)


def _check_scheme(ak: LoadedAk, sig: Signature, v: Verdict) -> bool:
    """Scheme vs key, then hash algorithm. Returns False when the signature cannot be checked."""
    area = ak.area
    allowed = (C.ALG_ECDSA,) if ak.is_ecc else (C.ALG_RSASSA, C.ALG_RSAPSS)
    kind = "ECC" if ak.is_ecc else "RSA"
    ok = True
    if sig.sig_alg not in allowed:
        v.add("signature_scheme_mismatch", f"{kind} AK cannot make a {sig.sig_alg:#06x} signature")
        ok = False
    elif area is not None and area.scheme not in (C.ALG_NULL, sig.sig_alg):
        v.add(
            "signature_scheme_mismatch",
            f"AK is fixed to scheme {area.scheme:#06x}, signature uses {sig.sig_alg:#06x}",
        )
        ok = False
    if sig.hash_alg not in ACCEPTED_QUOTE_HASHES:
        v.add("hash_alg_unsupported", f"quote hash {sig.hash_alg:#06x} is not SHA-256/384/512")
        ok = False
    elif area is not None and area.scheme_hash not in (C.ALG_NULL, sig.hash_alg):
        v.add(
            "hash_alg_mismatch",
            f"AK is fixed to hash {area.scheme_hash:#06x}, signature uses {sig.hash_alg:#06x}",
        )
        ok = False
    return ok


def _signature_ok(ak: LoadedAk, sig: Signature, message: bytes) -> str | None:
    """None when the signature verifies; otherwise why not."""
    try:
        if ak.is_ecc:  # known when the AK was loaded: no ABC isinstance per call
            der = encode_dss_signature(int.from_bytes(sig.r, "big"), int.from_bytes(sig.s, "big"))
            cast(ec.EllipticCurvePublicKey, ak.key).verify(
                der, message, ECDSA_BY_HASH[sig.hash_alg]
            )
            return None
        key = cast(rsa.RSAPublicKey, ak.key)
        if sig.sig_alg == C.ALG_RSAPSS:
            algo = C.HASH_ALGS[sig.hash_alg]()
            pss = padding.PSS(mgf=padding.MGF1(algo), salt_length=padding.PSS.AUTO)
            key.verify(sig.sig, message, pss, algo)
        else:
            key.verify(sig.sig, message, padding.PKCS1v15(), C.HASH_ALGS[sig.hash_alg]())
    except InvalidSignature:
        return "signature does not verify with the AK over the quoted TPMS_ATTEST"
    except ValueError as exc:
        return f"signature is not well formed: {exc}"
    return None


def _expected_digest(
    att: Attest, hash_alg: int, values: PcrValues, v: Verdict
) -> tuple[bytes, dict[str, dict[int, bytes]]] | None:
    """H(PCR values concatenated in the quote's selection order) and those values by bank,
    or None if values are missing."""
    parts: list[bytes] = []
    used: dict[str, dict[int, bytes]] = {}
    for alg, pcrs in att.pcr_select:
        name = C.HASH_NAMES[alg]
        found = values.get(name)
        bank: dict[Any, Any] = found if isinstance(found, dict) else {}
        size = C.DIGEST_SIZES[alg]
        used[name] = chosen = {}
        for pcr in _in_order(pcrs):
            # int keys; str keys too, as the values arrive after a JSON round trip
            value = bank.get(pcr)
            if value is None:
                value = bank.get(str(pcr))
            if not isinstance(value, bytes) or len(value) != size:
                v.add("pcr_values_incomplete", f"no valid {name} PCR {pcr} value")
                return None
            parts.append(value)
            chosen[pcr] = value
    return C.hash_bytes(hash_alg, b"".join(parts)), used


@lru_cache(maxsize=1024)  # a fleet uses a handful of distinct selections
def _in_order(pcrs: frozenset[int]) -> tuple[int, ...]:
    return tuple(sorted(pcrs))


def _check_selection(att: Attest, policy: PcrPolicy, v: Verdict) -> None:
    """The quote must cover every PCR the policy names (same bank); extra PCRs are reported.

    Like Keylime: the policy decides which PCRs must match, and a quote over more of them
    proves no less. The extras are still bound by the signed digest and shown in the verdict.
    """
    quoted = {alg: pcrs for alg, pcrs in att.pcr_select if pcrs}
    wanted = policy.tpm_selection_map
    if quoted == wanted:  # the usual case: exactly the policy's PCRs
        return
    missing = _minus(wanted, quoted)
    if missing:
        v.add(
            "pcr_selection_mismatch",
            f"quote covers {_fmt(quoted)}, policy wants {_fmt(wanted)}: {_fmt(missing)} missing",
        )
        return
    extra = _minus(quoted, wanted)
    if extra:
        v.add(
            "pcr_selection_extra",
            f"quote also covers {_fmt(extra)}, which the policy does not name: reported only",
            SEVERITY_INFO,
        )


def _minus(a: dict[int, frozenset[int]], b: dict[int, frozenset[int]]) -> dict[int, frozenset[int]]:
    """The PCRs of selection a that b lacks, per bank (banks with none left out)."""
    out = {alg: pcrs - b.get(alg, frozenset()) for alg, pcrs in a.items()}
    return {alg: pcrs for alg, pcrs in out.items() if pcrs}


def _fmt(sel: dict[int, frozenset[int]]) -> str:
    parts = [f"{C.HASH_NAMES[a]}:{','.join(map(str, sorted(p)))}" for a, p in sorted(sel.items())]
    return "+".join(parts) or "nothing"


def _check_golden(values: PcrValues, policy: PcrPolicy, v: Verdict) -> None:
    for bank, golden in sorted(policy.golden.items()):
        for pcr, want in sorted(golden.items()):
            got = values.get(bank, {}).get(pcr)
            if got != want:
                shown = got.hex() if isinstance(got, bytes) else "missing"
                v.add(
                    "pcr_value_mismatch", f"{bank} PCR {pcr} is {shown}, policy wants {want.hex()}"
                )


def _as_bytes(value: object, what: str) -> bytes:
    """bytes(x) of an int would allocate x zero bytes: accept only bytes-like input."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise MalformedEvidence(what, 0, f"expected bytes, got {type(value).__name__}")


def verify_quote(
    ak_public: bytes,
    quote: bytes,
    signature: bytes,
    pcr_values: PcrValues,
    nonce: bytes,
    policy: PcrPolicy | dict | None = None,
    previous_clock: ClockInfo | dict | None = None,
) -> Verdict:
    """Verify a TPM2_Quote. Never raises on bad evidence: every failure is a reason.

    `policy` and `previous_clock` may also be given in their JSON forms (`PcrPolicy.to_json()`,
    `ClockInfo.to_dict()`), as the ledger stores them.
    """
    v = Verdict()
    if policy is not None and not isinstance(policy, PcrPolicy):
        try:
            policy = PcrPolicy.from_json(policy)
        except PolicyError as exc:
            v.add("policy_invalid", f"PCR policy: {exc}")
            return v
    if previous_clock is not None and not isinstance(previous_clock, ClockInfo):
        try:
            previous_clock = ClockInfo.from_dict(previous_clock)
        except ValueError as exc:
            v.add("previous_clock_invalid", f"stored clock of the previous quote: {exc}")
            return v
    try:
        ak = _load_ak(_as_bytes(ak_public, "AK public"))
    except (MalformedEvidence, TypeError) as exc:
        v.add("ak_malformed", f"AK public key: {exc}")
        return v
    if ak.area is None:
        v.add(
            "ak_attributes_unchecked",
            "AK given as a bare public key: restricted/fixedTPM cannot be checked, so this "
            "verdict is weaker (a non-restricted key could have signed forged bytes)",
            SEVERITY_WARNING,
        )
    else:
        v.ak_name = ak.name
        v.ak_attributes_checked = True
        v.reasons.extend(ak.attribute_reasons)
    try:
        sig = parse_signature(_as_bytes(signature, "TPMT_SIGNATURE"))
    except (MalformedEvidence, TypeError) as exc:
        v.add("signature_malformed", str(exc))
        return v
    try:
        att = parse_attest(_as_bytes(quote, "TPMS_ATTEST"))
    except (MalformedEvidence, TypeError) as exc:
        v.add("quote_malformed", str(exc))
        return v
    if not _check_scheme(ak, sig, v):
        return v
    why = _signature_ok(ak, sig, att.raw)
    if why:
        v.add("signature_invalid", why)
        return v
    return _check_body(v, att, sig, pcr_values, nonce, policy, previous_clock)


def _check_body(
    v: Verdict,
    att: Attest,
    sig: Signature,
    pcr_values: PcrValues,
    nonce: bytes,
    policy: PcrPolicy | None,
    previous_clock: ClockInfo | None,
) -> Verdict:
    if att.magic != C.TPM_GENERATED_VALUE:
        v.add("magic_invalid", f"magic {att.magic:#010x} is not TPM_GENERATED_VALUE: not TPM-made")
    if att.type != C.TPM_ST_ATTEST_QUOTE:
        v.add("type_not_quote", f"attestation type {att.type:#06x} is not TPM_ST_ATTEST_QUOTE")
        return v
    v.clock = ClockInfo(att.clock, att.reset_count, att.restart_count, att.safe)
    v.firmware_version = att.firmware_version
    v.pcr_digest = att.pcr_digest
    if (
        not isinstance(nonce, (bytes, bytearray))
        or not MIN_NONCE_BYTES <= len(nonce) <= MAX_NONCE_BYTES
    ):
        v.add(
            "nonce_invalid",
            f"the verifier's nonce must be {MIN_NONCE_BYTES}..{MAX_NONCE_BYTES} bytes",
        )
    elif not hmac.compare_digest(att.extra_data, bytes(nonce)):
        v.add("nonce_mismatch", "quote extraData is not the nonce we issued (stale or replayed)")
    if policy is None:
        policy = DEFAULT_POLICY
        v.reasons.append(DEFAULT_POLICY_REASON)
    elif not policy.has_golden_values:
        v.reasons.append(NO_GOLDEN_REASON)
    v.policy = policy
    _check_selection(att, policy, v)
    values = pcr_values if isinstance(pcr_values, dict) else {}
    expected = _expected_digest(att, sig.hash_alg, values, v)
    if expected is not None and not hmac.compare_digest(expected[0], att.pcr_digest):
        v.add("pcr_digest_mismatch", "the reported PCR values do not hash to the quoted pcrDigest")
    elif expected is not None:
        v.pcr_values = expected[1]  # only values the signed digest vouches for are reported
        _check_golden(v.pcr_values, policy, v)
    v.reasons.extend(clock_policy.judge(v.clock, previous_clock))
    return v
