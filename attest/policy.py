"""PCR policies: which PCRs a quote must cover and the golden values they must hold.

JSON form: `{"pcrs": {"sha256": {"0": "<hex>", "7": "<hex>"}}}`. A PCR whose value is
`null` is selected (must be quoted) but any value is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attest import tpm_constants as C
from attest.errors import PolicyError
from attest.structs import Selection

DEFAULT_BANK = "sha256"
DEFAULT_PCRS = (0, 2, 7)  # firmware code, option ROMs, Secure Boot state
MAX_POLICY_JSON_BYTES = 64 * 1024


@dataclass(frozen=True)
class PcrPolicy:
    """`selection`: bank name → PCR indices; `golden`: bank → {pcr: expected digest}."""

    selection: dict[str, frozenset[int]]
    golden: dict[str, dict[int, bytes]] = field(default_factory=dict)

    @classmethod
    def default(cls) -> PcrPolicy:
        """sha256 PCRs 0, 2, 7 with no golden values (quote must cover them, any value)."""
        return cls({DEFAULT_BANK: frozenset(DEFAULT_PCRS)}, {})

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | str | bytes) -> PcrPolicy:
        if isinstance(doc, str | bytes):
            if len(doc) > MAX_POLICY_JSON_BYTES:
                raise PolicyError(f"policy document exceeds {MAX_POLICY_JSON_BYTES} bytes")
            try:
                doc = json.loads(doc)
            except ValueError as exc:
                raise PolicyError(f"policy is not JSON: {exc}") from None
        if not isinstance(doc, Mapping) or not isinstance(doc.get("pcrs"), Mapping):
            raise PolicyError('policy must be an object with a "pcrs" object')
        selection: dict[str, frozenset[int]] = {}
        golden: dict[str, dict[int, bytes]] = {}
        for bank, pcrs in doc["pcrs"].items():
            if bank not in C.HASH_IDS:
                raise PolicyError(f"unknown PCR bank {bank!r}")
            if not isinstance(pcrs, Mapping) or not pcrs:
                raise PolicyError(f"bank {bank!r} must map PCR indices to hex digests")
            size = C.DIGEST_SIZES[C.HASH_IDS[bank]]
            selected = set()
            for key, value in pcrs.items():
                pcr = _pcr_index(bank, key)
                selected.add(pcr)
                if value is not None:
                    golden.setdefault(bank, {})[pcr] = _digest(bank, pcr, value, size)
            selection[bank] = frozenset(selected)
        if not selection:
            raise PolicyError("policy selects no PCRs")
        return cls(selection, golden)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, dict[str, str | None]] = {}
        for bank in sorted(self.selection):
            values = self.golden.get(bank, {})
            out[bank] = {
                str(pcr): (values[pcr].hex() if pcr in values else None)
                for pcr in sorted(self.selection[bank])
            }
        return {"pcrs": out}

    @property
    def has_golden_values(self) -> bool:
        return any(self.golden.values())

    def tpm_selection(self) -> Selection:
        """The selection as (alg id, PCR set) pairs, in ascending alg id order."""
        return tuple(
            sorted((C.HASH_IDS[bank], frozenset(pcrs)) for bank, pcrs in self.selection.items())
        )


def _pcr_index(bank: str, key: object) -> int:
    try:
        pcr = int(str(key), 10)
    except ValueError:
        raise PolicyError(f"{bank}: PCR index {key!r} is not an integer") from None
    if not 0 <= pcr < C.PCR_COUNT:
        raise PolicyError(f"{bank}: PCR index {pcr} outside 0..{C.PCR_COUNT - 1}")
    return pcr


def _digest(bank: str, pcr: int, value: object, size: int) -> bytes:
    if not isinstance(value, str):
        raise PolicyError(f"{bank}:{pcr}: golden value must be a hex string")
    try:
        digest = bytes.fromhex(value.removeprefix("0x"))
    except ValueError:
        raise PolicyError(f"{bank}:{pcr}: golden value is not hex") from None
    if len(digest) != size:
        raise PolicyError(f"{bank}:{pcr}: golden value is {len(digest)} bytes, want {size}")
    return digest
