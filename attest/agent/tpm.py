"""Agent side: EK, AK, ActivateCredential and Quote through tpm2-pytss ESAPI.

Written for a TPM without a resource manager (swtpm): every transient object and session is
flushed before the call returns, and at most the EK and one AK are loaded at a time.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass

# NVReadEK probes optional NV indices; tpm2-tss logs each absent one as an ERROR. Those are
# expected here, so keep tss quiet unless the operator asked for logs.
os.environ.setdefault("TSS2_LOG", "all+NONE")

from tpm2_pytss import (
    ESAPI,
    ESYS_TR,
    TPM2_ALG,
    TPM2_CAP,
    TPM2_HC,
    TPM2_SE,
    TPM2B_ENCRYPTED_SECRET,
    TPM2B_EVENT,
    TPM2B_ID_OBJECT,
    TPM2B_PRIVATE,
    TPM2B_PUBLIC,
    TPMA_OBJECT,
    TPML_DIGEST_VALUES,
    TPML_PCR_SELECTION,
    TPMT_HA,
    TPMT_SYM_DEF,
    TPMU_HA,
    TSS2_Exception,
)
from tpm2_pytss.utils import NVReadEK, create_ek_template

from attest import tpm_constants as C
from attest.pcrfile import PcrValues
from attest.policy import DEFAULT_SELECTION
from attest.structs import parse_attest

EK_HANDLE_RSA = 0x81010001  # TCG EK Credential Profile: persistent RSA-2048 EK
EK_CERT_NV_RSA = 0x01C00002
EK_CERT_NV_ECC = 0x01C0000A
NV_CHUNK_BYTES = 512  # below every TPM's TPM2_PT_NV_BUFFER_MAX
MAX_EK_CERT_BYTES = 4096
QUOTE_ATTEMPTS = 3  # retakes when a PCR changes between the quote and the PCR read
CONNECT_ATTEMPTS = 4
CONNECT_RETRY_S = 0.25  # backoff step between connection attempts
PCR_COUNT = 24
MAX_EVENT_BYTES = 1024  # TPM2B_EVENT's limit
PCR_READ_MAX_DIGESTS = 8  # TPM2_PCR_Read returns at most 8 digests per call

AK_ECC = "ecc"
AK_RSA = "rsa"
AK_ATTRS = (
    TPMA_OBJECT.RESTRICTED
    | TPMA_OBJECT.SIGN_ENCRYPT
    | TPMA_OBJECT.FIXEDTPM
    | TPMA_OBJECT.FIXEDPARENT
    | TPMA_OBJECT.SENSITIVEDATAORIGIN
    | TPMA_OBJECT.USERWITHAUTH
)
AK_RSA_PSS = "rsa-pss"
AK_TEMPLATES = {
    AK_ECC: "ecc256:ecdsa-sha256:null",
    AK_RSA: "rsa2048:rsassa-sha256:null",
    AK_RSA_PSS: "rsa2048:rsapss-sha256:null",
}


@dataclass(frozen=True)
class AkKey:
    """An AK as the agent keeps it: TPM2B_PUBLIC and the TPM-wrapped TPM2B_PRIVATE."""

    public: bytes
    private: bytes
    name: bytes

    def to_dict(self) -> dict[str, str]:
        enc = base64.b64encode
        return {k: enc(getattr(self, k)).decode() for k in ("public", "private", "name")}

    @classmethod
    def from_dict(cls, doc: dict[str, str]) -> AkKey:
        dec = base64.b64decode
        return cls(dec(doc["public"]), dec(doc["private"]), dec(doc["name"]))


@dataclass(frozen=True)
class EnrolmentRequest:
    ek_public: bytes  # TPM2B_PUBLIC
    ek_certificate: bytes | None  # DER, from NV
    ak: AkKey


@dataclass(frozen=True)
class QuoteEvidence:
    quote: bytes  # TPMS_ATTEST (unwrapped, as `tpm2_quote -m` writes)
    signature: bytes  # TPMT_SIGNATURE
    pcr_values: PcrValues


def _digest_matches(attest: bytes, hash_alg: int, values: PcrValues) -> bool:
    att = parse_attest(attest)
    parts = [values[C.HASH_NAMES[alg]][p] for alg, pcrs in att.pcr_select for p in sorted(pcrs)]
    return C.hash_bytes(hash_alg, b"".join(parts)) == att.pcr_digest


def _connect(tcti: str) -> ESAPI:
    """Open the TPM. A TCP TPM (swtpm) serves one client at a time and may still be closing
    the previous connection on a loaded host, so a failed connect is retried briefly."""
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            return ESAPI(tcti)
        except TSS2_Exception:
            if attempt == CONNECT_ATTEMPTS:
                raise
            time.sleep(CONNECT_RETRY_S * attempt)
    raise AssertionError("unreachable")


class Agent:
    """One TPM, chosen by TCTI (`swtpm:host=127.0.0.1,port=N`, `device:/dev/tpmrm0`)."""

    def __init__(self, tcti: str, ek_type: str = "rsa") -> None:
        if ek_type not in (AK_RSA, AK_ECC):
            raise ValueError(f"ek_type must be 'rsa' or 'ecc', not {ek_type!r}")
        self.ek_type = ek_type
        self.esapi = _connect(tcti)

    def close(self) -> None:
        self.esapi.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- EK ---------------------------------------------------------------------------
    def _persistent_handles(self) -> set[int]:
        _more, data = self.esapi.get_capability(TPM2_CAP.HANDLES, TPM2_HC.PERSISTENT_FIRST, 64)
        return set(data.data.handles)

    @contextmanager
    def ek(self) -> Iterator[ESYS_TR]:
        """The EK: the persistent RSA one if present, else created from the standard template
        (and flushed afterwards)."""
        if self.ek_type == AK_RSA and EK_HANDLE_RSA in self._persistent_handles():
            yield self.esapi.tr_from_tpmpublic(EK_HANDLE_RSA)
            return
        template_name = "EK-RSA2048" if self.ek_type == AK_RSA else "EK-ECC256"
        _, template = create_ek_template(template_name, NVReadEK(self.esapi))
        handle = self.esapi.create_primary(None, template, ESYS_TR.ENDORSEMENT)[0]
        try:
            yield handle
        finally:
            self.esapi.flush_context(handle)

    @contextmanager
    def _ek_session(self) -> Iterator[ESYS_TR]:
        """A policy session satisfying the EK's policy (PolicySecret on the endorsement
        hierarchy); one per EK-authorised command, flushed after."""
        session = self.esapi.start_auth_session(
            ESYS_TR.NONE,
            ESYS_TR.NONE,
            TPM2_SE.POLICY,
            TPMT_SYM_DEF(algorithm=TPM2_ALG.NULL),
            TPM2_ALG.SHA256,
        )
        try:
            self.esapi.policy_secret(ESYS_TR.ENDORSEMENT, session, b"", b"", b"", 0)
            yield session
        finally:
            with suppress(TSS2_Exception):
                self.esapi.flush_context(session)

    def ek_public(self) -> bytes:
        with self.ek() as ek:
            return self.esapi.read_public(ek)[0].marshal()

    def ek_certificate(self) -> bytes | None:
        """The EK certificate (DER) from its NV index, or None when the TPM has none."""
        index = EK_CERT_NV_RSA if self.ek_type == AK_RSA else EK_CERT_NV_ECC
        _more, data = self.esapi.get_capability(TPM2_CAP.HANDLES, index, 1)
        if index not in set(data.data.handles):
            return None
        nv = self.esapi.tr_from_tpmpublic(index)
        size = self.esapi.nv_read_public(nv)[0].nvPublic.dataSize
        if size > MAX_EK_CERT_BYTES:
            raise ValueError(
                f"EK certificate NV index holds {size} bytes, limit {MAX_EK_CERT_BYTES}"
            )
        out = b""
        while len(out) < size:
            chunk = min(NV_CHUNK_BYTES, size - len(out))
            out += bytes(self.esapi.nv_read(nv, chunk, len(out), auth_handle=nv))
        return out

    # -- AK ---------------------------------------------------------------------------
    def create_ak(self, alg: str = AK_ECC) -> AkKey:
        if alg not in AK_TEMPLATES:
            raise ValueError(f"AK algorithm must be one of {sorted(AK_TEMPLATES)}")
        template = TPM2B_PUBLIC.parse(AK_TEMPLATES[alg], objectAttributes=AK_ATTRS)
        with self.ek() as ek, self._ek_session() as session:
            private, public = self.esapi.create(ek, None, template, session1=session)[:2]
        return AkKey(public.marshal(), private.marshal(), public.get_name().marshal()[2:])

    @contextmanager
    def _loaded_ak(self, ak: AkKey, ek: ESYS_TR) -> Iterator[ESYS_TR]:
        public = TPM2B_PUBLIC.unmarshal(ak.public)[0]
        private = TPM2B_PRIVATE.unmarshal(ak.private)[0]
        with self._ek_session() as session:
            handle = self.esapi.load(ek, private, public, session1=session)
        try:
            yield handle
        finally:
            self.esapi.flush_context(handle)

    def enrol(self, alg: str = AK_ECC) -> EnrolmentRequest:
        """Everything the verifier needs to start enrolment: EK public + cert, a fresh AK."""
        return EnrolmentRequest(self.ek_public(), self.ek_certificate(), self.create_ak(alg))

    def activate(self, ak: AkKey, credential_blob: bytes, secret: bytes) -> bytes:
        """ActivateCredential: recover the verifier's secret, proving AK and EK share a TPM.
        Both arguments are TPM2B-marshalled (size prefix included)."""
        blob = TPM2B_ID_OBJECT.unmarshal(credential_blob)[0]
        enc = TPM2B_ENCRYPTED_SECRET.unmarshal(secret)[0]
        with self.ek() as ek, self._loaded_ak(ak, ek) as handle, self._ek_session() as session:
            digest = self.esapi.activate_credential(
                handle, ek, blob, enc, session1=ESYS_TR.PASSWORD, session2=session
            )
        return bytes(digest)

    # -- Quote ------------------------------------------------------------------------
    def read_pcrs(self, selection: str = DEFAULT_SELECTION) -> PcrValues:
        out: PcrValues = {}
        for bank in selection.split("+"):
            name, _, pcrs = bank.partition(":")
            indices = sorted(int(p) for p in pcrs.split(","))
            for i in range(0, len(indices), PCR_READ_MAX_DIGESTS):
                part = indices[i : i + PCR_READ_MAX_DIGESTS]
                sel = TPML_PCR_SELECTION.parse(f"{name}:{','.join(map(str, part))}")
                _, _sel, digests = self.esapi.pcr_read(sel)
                values = [bytes(d) for d in digests]
                if len(values) != len(part):
                    raise RuntimeError(f"TPM returned {len(values)} of {len(part)} PCRs")
                out.setdefault(name, {}).update(zip(part, values, strict=True))
        return out

    def quote(self, ak: AkKey, nonce: bytes, selection: str = DEFAULT_SELECTION) -> QuoteEvidence:
        """TPM2_Quote over `selection` with `nonce` as qualifying data, plus the PCR values.

        The values are read after the quote; if a PCR was extended in between they no longer
        hash to the quoted digest, so the quote is retaken (the verifier would reject it)."""
        with self.ek() as ek, self._loaded_ak(ak, ek) as handle:
            for _ in range(QUOTE_ATTEMPTS):
                attest, signature = self.esapi.quote(handle, selection, nonce)
                values = self.read_pcrs(selection)
                if _digest_matches(bytes(attest), signature.signature.any.hashAlg, values):
                    break
        return QuoteEvidence(bytes(attest), signature.marshal(), values)

    def extend_pcr(self, pcr: int, data: bytes) -> None:
        """Extend a sha256 PCR (the demo's way to make a node fail its policy)."""
        if not 0 <= pcr < PCR_COUNT or len(data) > MAX_EVENT_BYTES:
            raise ValueError(f"PCR {pcr} or event of {len(data)} bytes out of range")
        self.esapi.pcr_event(ESYS_TR.PCR0 + pcr, TPM2B_EVENT(data))

    def extend_digests(self, pcr: int, digests: Mapping[int, bytes]) -> None:
        """TPM2_PCR_Extend with one digest per bank ({TPM_ALG_ID: digest}), as firmware
        extends what it logs (test and demo nodes boot this way from a built event log)."""
        if not 0 <= pcr < PCR_COUNT:
            raise ValueError(f"PCR {pcr} out of range")
        values = []
        for alg, digest in digests.items():
            if C.DIGEST_SIZES.get(alg) != len(digest):
                raise ValueError(f"a {len(digest)}-byte digest for bank {alg:#06x}")
            field = C.HASH_NAMES[alg]
            values.append(TPMT_HA(hashAlg=alg, digest=TPMU_HA(**{field: digest})))
        self.esapi.pcr_extend(ESYS_TR.PCR0 + pcr, TPML_DIGEST_VALUES(values))
