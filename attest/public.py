"""TPM2B_PUBLIC / TPMT_PUBLIC parser (RSA and ECC) and the TPM Name of an object.

Pure `cryptography`: the chaincode imports this. Every malformed input raises
`MalformedEvidence` naming the field and offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec, rsa

from attest import tpm_constants as C
from attest.errors import MalformedEvidence
from attest.wire import Reader, tpm2b

RSA_DEFAULT_EXPONENT = 65537  # exponent 0 in TPMS_RSA_PARMS means 2^16 + 1
RSA_KEY_BITS = (1024, 2048, 3072, 4096)
MAX_AUTH_POLICY_BYTES = 64  # the largest digest (SHA-512)
MAX_RSA_MODULUS_BYTES = 512  # RSA-4096
ECC_CURVES: dict[int, tuple[ec.EllipticCurve, int]] = {
    C.ECC_NIST_P256: (ec.SECP256R1(), 32),
    C.ECC_NIST_P384: (ec.SECP384R1(), 48),
    C.ECC_NIST_P521: (ec.SECP521R1(), 66),
}
# Schemes whose details are a hash algorithm (TPMS_SCHEME_HASH); ECDAA adds a count.
HASH_SCHEMES = {C.ALG_RSASSA, C.ALG_RSAPSS, C.ALG_ECDSA, 0x001B, 0x001C, C.ALG_ECDH, 0x0017}
ALG_ECDAA = 0x001A
# A software AK's attributes: an AK's required ones, plus how tpm2_createak makes its key.
SOFTWARE_AK_ATTRS = C.AK_REQUIRED_ATTRS | C.ATTR_SENSITIVE_DATA_ORIGIN | C.ATTR_USER_WITH_AUTH


@dataclass(frozen=True)
class PublicArea:
    """A parsed TPMT_PUBLIC; `raw` is the exact TPMT_PUBLIC bytes the Name is computed over."""

    type: int
    name_alg: int
    attributes: int
    auth_policy: bytes
    sym_alg: int
    sym_key_bits: int  # 0 when sym_alg is NULL
    scheme: int
    scheme_hash: int
    key_bits: int  # RSA modulus bits, or ECC coordinate bits
    curve: int  # 0 for RSA
    exponent: int  # 0 for ECC
    unique: tuple[bytes, ...]  # (modulus,) for RSA, (x, y) for ECC
    raw: bytes

    @property
    def is_rsa(self) -> bool:
        return self.type == C.ALG_RSA

    def has_attributes(self, mask: int) -> bool:
        return self.attributes & mask == mask

    def name(self) -> bytes:
        """TPM Name: nameAlg (2 bytes) || H_nameAlg(TPMT_PUBLIC)."""
        if self.name_alg not in C.HASH_ALGS:
            raise MalformedEvidence("TPMT_PUBLIC.nameAlg", 2, f"no Name for alg {self.name_alg:#x}")
        return self.name_alg.to_bytes(2, "big") + C.hash_bytes(self.name_alg, self.raw)

    def public_key(self) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
        """The key as a `cryptography` object (raises MalformedEvidence if not a valid key)."""
        try:
            if self.is_rsa:
                n = int.from_bytes(self.unique[0], "big")
                return rsa.RSAPublicNumbers(self.exponent, n).public_key()
            curve = ECC_CURVES[self.curve][0]
            x, y = (int.from_bytes(v, "big") for v in self.unique)
            return ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
        except ValueError as exc:
            raise MalformedEvidence(
                "TPMT_PUBLIC.unique", 0, f"not a valid public key: {exc}"
            ) from None

    def describe(self) -> str:
        if self.is_rsa:
            return f"RSA-{self.key_bits}"
        return f"ECC-P{self.key_bits}"


def _sym_def(r: Reader, head: dict) -> None:
    alg = r.u16("parameters.symmetric.algorithm")
    bits = 0
    if alg != C.ALG_NULL:
        bits = r.u16("parameters.symmetric.keyBits")
        r.u16("parameters.symmetric.mode")
    head["sym_alg"], head["sym_key_bits"] = alg, bits


def _scheme(r: Reader, field: str) -> tuple[int, int]:
    scheme = r.u16(f"{field}.scheme")
    if scheme == C.ALG_NULL:
        return scheme, C.ALG_NULL
    if scheme not in HASH_SCHEMES and scheme != ALG_ECDAA:
        raise r.fail(f"{field}.scheme", f"unsupported scheme {scheme:#06x}", r.offset - 2)
    hash_alg = r.u16(f"{field}.details.hashAlg")
    if scheme == ALG_ECDAA:
        r.u16(f"{field}.details.count")
    return scheme, hash_alg


def _rsa(r: Reader, head: dict) -> dict:
    _sym_def(r, head)
    head["scheme"], head["scheme_hash"] = _scheme(r, "parameters.scheme")
    bits_at = r.offset
    bits = r.u16("parameters.keyBits")
    if bits not in RSA_KEY_BITS:
        raise r.fail("parameters.keyBits", f"unsupported RSA size {bits}", bits_at)
    exponent = r.u32("parameters.exponent") or RSA_DEFAULT_EXPONENT
    if exponent < 3 or exponent % 2 == 0:
        raise r.fail("parameters.exponent", f"invalid RSA exponent {exponent}", r.offset - 4)
    mod_at = r.offset
    modulus = r.tpm2b("unique.rsa", MAX_RSA_MODULUS_BYTES)
    if len(modulus) * 8 != bits:
        raise r.fail("unique.rsa", f"modulus is {len(modulus)} bytes for {bits} bits", mod_at)
    return head | {"key_bits": bits, "curve": 0, "exponent": exponent, "unique": (modulus,)}


def _ecc(r: Reader, head: dict) -> dict:
    _sym_def(r, head)
    head["scheme"], head["scheme_hash"] = _scheme(r, "parameters.scheme")
    curve_at = r.offset
    curve = r.u16("parameters.curveID")
    if curve not in ECC_CURVES:
        raise r.fail("parameters.curveID", f"unsupported curve {curve:#06x}", curve_at)
    kdf = r.u16("parameters.kdf.scheme")
    if kdf != C.ALG_NULL:
        r.u16("parameters.kdf.hashAlg")
    size = ECC_CURVES[curve][1]
    x = r.tpm2b("unique.ecc.x", size)
    y = r.tpm2b("unique.ecc.y", size)
    bits = 521 if curve == C.ECC_NIST_P521 else size * 8
    return head | {"key_bits": bits, "curve": curve, "exponent": 0, "unique": (x, y)}


def read_public(r: Reader) -> PublicArea:
    """Read one TPMT_PUBLIC from `r` (no size prefix)."""
    start = r.offset
    type_at = r.offset
    obj_type = r.u16("type")
    name_alg = r.u16("nameAlg")
    if name_alg not in C.HASH_ALGS:
        raise r.fail("nameAlg", f"unsupported name algorithm {name_alg:#06x}", r.offset - 2)
    attributes = r.u32("objectAttributes")
    auth_policy = r.tpm2b("authPolicy", MAX_AUTH_POLICY_BYTES)
    head: dict[str, object] = {"type": obj_type, "name_alg": name_alg}
    head |= {"attributes": attributes, "auth_policy": auth_policy}
    if obj_type == C.ALG_RSA:
        fields = _rsa(r, head)
    elif obj_type == C.ALG_ECC:
        fields = _ecc(r, head)
    else:
        raise r.fail("type", f"not an RSA or ECC key: {obj_type:#06x}", type_at)
    return PublicArea(**fields, raw=r.data[start : r.offset])


def encode_ecc_public(
    key: ec.EllipticCurvePublicKey, attributes: int, scheme: int = C.ALG_ECDSA
) -> bytes:
    """TPM2B_PUBLIC of a P-256 key, SHA-256 name, with `attributes` and signing `scheme`
    (ALG_NULL for none): what `parse_public` reads back. For software keys (benches, tests);
    a real AK's public area always comes from its TPM."""
    n = key.public_numbers()
    body = C.ALG_ECC.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
    body += attributes.to_bytes(4, "big") + tpm2b(b"")
    body += C.ALG_NULL.to_bytes(2, "big")  # symmetric
    body += scheme.to_bytes(2, "big")
    if scheme != C.ALG_NULL:
        body += C.ALG_SHA256.to_bytes(2, "big")
    body += C.ECC_NIST_P256.to_bytes(2, "big") + C.ALG_NULL.to_bytes(2, "big")  # curve, kdf
    body += tpm2b(n.x.to_bytes(32, "big")) + tpm2b(n.y.to_bytes(32, "big"))
    return tpm2b(body)


def software_ak_public() -> bytes:
    """TPM2B_PUBLIC of a fresh software P-256 key with an AK's attributes (restricted
    signing, fixedTPM, fixedParent): RegisterNode accepts it, but no quote it signs could
    come from a TPM, so it stands only where nothing is attested (benches, engine tests)."""
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return encode_ecc_public(key, SOFTWARE_AK_ATTRS)


def parse_public(data: bytes) -> PublicArea:
    """Parse TPM2B_PUBLIC (as `tpm2_createak -f tss` writes) or bare TPMT_PUBLIC bytes."""
    r = Reader(data, "TPM2B_PUBLIC")
    if len(r.data) >= 2 and int.from_bytes(r.data[:2], "big") == len(r.data) - 2:
        r.u16("size")  # the TPM2B wrapper: a type id never equals the remaining length
        area = read_public(r)
    else:
        r.what = "TPMT_PUBLIC"
        area = read_public(r)
    r.end()
    return area
