"""The attestation library's own errors: every parser failure names the field and offset."""

from __future__ import annotations


class AttestError(Exception):
    """Base class for every error this package raises on purpose."""


class MalformedEvidence(AttestError):
    """Untrusted bytes did not parse as the TPM structure they claim to be."""

    def __init__(self, field: str, offset: int, detail: str) -> None:
        self.field = field
        self.offset = offset
        self.detail = detail
        super().__init__(f"{field} at offset {offset}: {detail}")


class PolicyError(AttestError):
    """A PCR policy document is invalid (bad bank, PCR index or digest length)."""


class EnrolmentError(AttestError):
    """EK certificate, EK public area or credential activation did not check out."""


class MalformedLog(MalformedEvidence):
    """A measured-boot event log or an IMA measurement list did not parse. `code` is the
    reason code a verdict carries (`eventlog.truncated`, `ima.bad_line`, ...); field and
    offset name where, as for every other structure."""

    def __init__(self, code: str, field: str, offset: int, detail: str) -> None:
        self.code = code
        super().__init__(field, offset, detail)
