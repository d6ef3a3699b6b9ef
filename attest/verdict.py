"""Verdict objects: every check that failed (or was skipped) with a code and a sentence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITY_ERROR = "error"  # the quote must not be trusted
SEVERITY_WARNING = "warning"  # verified, but weaker than a full check (say why)
SEVERITY_INFO = "info"  # context for the reader, e.g. which policy was applied
SEVERITIES = (SEVERITY_ERROR, SEVERITY_WARNING, SEVERITY_INFO)


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str
    severity: str = SEVERITY_ERROR

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "detail": self.detail, "severity": self.severity}


@dataclass(frozen=True)
class ClockInfo:
    """TPMS_CLOCK_INFO from a quote: clock in ms since the TPM's last Clear."""

    clock: int
    reset_count: int
    restart_count: int
    safe: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "reset_count": self.reset_count,
            "restart_count": self.restart_count,
            "safe": self.safe,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ClockInfo:
        """Strict: the ledger stores these, so a bad record must not pass as a clock."""
        if not isinstance(doc, dict):
            raise ValueError("clock info must be an object")
        values = []
        for key in ("clock", "reset_count", "restart_count"):
            v = doc.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
                raise ValueError(f"clock info field {key!r} must be an unsigned integer")
            values.append(v)
        if not isinstance(doc.get("safe"), bool):
            raise ValueError("clock info field 'safe' must be a boolean")
        return cls(values[0], values[1], values[2], doc["safe"])


@dataclass
class Verdict:
    """The outcome of `verify_quote`. `valid` is True only when no error-severity reason."""

    reasons: list[Reason] = field(default_factory=list)
    clock: ClockInfo | None = None
    pcr_digest: bytes | None = None
    ak_name: bytes | None = None
    ak_attributes_checked: bool = False
    pcr_values: dict[str, dict[int, bytes]] | None = None
    firmware_version: int | None = None
    policy: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return not any(r.severity == SEVERITY_ERROR for r in self.reasons)

    def add(self, code: str, detail: str, severity: str = SEVERITY_ERROR) -> None:
        self.reasons.append(Reason(code, detail, severity))

    def codes(self, severity: str | None = SEVERITY_ERROR) -> list[str]:
        return [r.code for r in self.reasons if severity is None or r.severity == severity]

    def to_dict(self) -> dict[str, Any]:
        pcrs = None
        if self.pcr_values is not None:
            pcrs = {
                b: {str(p): v.hex() for p, v in vs.items()} for b, vs in self.pcr_values.items()
            }
        return {
            "valid": self.valid,
            "reasons": [r.to_dict() for r in self.reasons],
            "ak_attributes_checked": self.ak_attributes_checked,
            "ak_name": self.ak_name.hex() if self.ak_name is not None else None,
            "clock": self.clock.to_dict() if self.clock else None,
            "firmware_version": self.firmware_version,
            "pcr_digest": self.pcr_digest.hex() if self.pcr_digest is not None else None,
            "pcr_values": pcrs,
            "policy": self.policy,
        }
