"""PCR policies: which PCRs a quote must cover and the golden values they must hold.

JSON form: `{"pcrs": {"sha256": {"0": "<hex>", "7": "<hex>"}}}`. A PCR whose value is
`null` is selected (must be quoted) but any value is accepted.

The one rule for the policies the ledger records, used by the web app's model (a draft may
leave values null), enrolment and the contract's arguments (both need every value):
`ledger_problems` — only the banks in LEDGER_BANKS, a golden value for each selected PCR.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from attest import tpm_constants as C
from attest.errors import PolicyError
from attest.structs import Selection

DEFAULT_BANK = "sha256"
DEFAULT_PCRS = (0, 2, 7)  # firmware code, option ROMs, Secure Boot state
MAX_POLICY_JSON_BYTES = 64 * 1024
# The banks the ledger records golden values and quoted PCRs for (its endorsers re-verify
# quotes against them): SHA-256 only.
LEDGER_BANKS = frozenset({DEFAULT_BANK})


def selection_text(selection: Mapping[str, Iterable[int]]) -> str:
    """A PCR selection in tpm2-tools' syntax: `sha256:0,2,7` (banks joined by `+`)."""
    return "+".join(
        f"{bank}:{','.join(map(str, sorted(pcrs)))}" for bank, pcrs in sorted(selection.items())
    )


DEFAULT_SELECTION = selection_text({DEFAULT_BANK: DEFAULT_PCRS})  # "sha256:0,2,7"


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
                pcr = pcr_index(bank, key)
                selected.add(pcr)
                if value is not None:
                    golden.setdefault(bank, {})[pcr] = _digest(bank, pcr, value, size)
            selection[bank] = frozenset(selected)
        if not selection:
            raise PolicyError("policy selects no PCRs")
        return cls(selection, golden)

    @classmethod
    def for_ledger(cls, doc: Mapping[str, Any] | str | bytes) -> PcrPolicy:
        """Parse a policy the ledger may record; PolicyError names the first problem."""
        policy = cls.from_json(doc)
        problems = policy.ledger_problems()
        if problems:
            raise PolicyError(problems[0])
        return policy

    def unsupported_banks(self) -> list[str]:
        """Problems with banks the ledger does not record (a draft may not have them either)."""
        return [
            f"bank {bank!r}: the ledger records {', '.join(sorted(LEDGER_BANKS))} PCRs only"
            for bank in sorted(set(self.selection) - LEDGER_BANKS)
        ]

    def missing_golden(self) -> list[str]:
        """Selected PCRs without a golden value, as "bank:pcr"."""
        return [
            f"{bank}:{pcr}"
            for bank in sorted(self.selection)
            for pcr in sorted(self.selection[bank])
            if pcr not in self.golden.get(bank, {})
        ]

    def ledger_problems(self) -> list[str]:
        """Why the ledger would refuse to record this policy; empty when it would not."""
        missing = self.missing_golden()
        return self.unsupported_banks() + (
            [f"no golden value for {', '.join(missing)}"] if missing else []
        )

    def selection_text(self) -> str:
        return selection_text(self.selection)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, dict[str, str | None]] = {}
        for bank in sorted(self.selection):
            values = self.golden.get(bank, {})
            out[bank] = {
                str(pcr): (values[pcr].hex() if pcr in values else None)
                for pcr in sorted(self.selection[bank])
            }
        return {"pcrs": out}

    # Cached: the verifier asks on every quote. (cached_property writes the instance
    # __dict__ directly, so it works on a frozen dataclass.)
    @cached_property
    def has_golden_values(self) -> bool:
        return any(self.golden.values())

    @cached_property
    def tpm_selection_map(self) -> dict[int, frozenset[int]]:
        """Alg id → non-empty PCR set, for comparing with a quote's selection."""
        return {C.HASH_IDS[bank]: pcrs for bank, pcrs in self.selection.items() if pcrs}

    def tpm_selection(self) -> Selection:
        """The selection as (alg id, PCR set) pairs, in ascending alg id order."""
        return tuple(
            sorted((C.HASH_IDS[bank], frozenset(pcrs)) for bank, pcrs in self.selection.items())
        )


def pcr_index(bank: str, key: object) -> int:
    """A PCR index from its JSON key: a decimal integer in 0..PCR_COUNT-1, written as
    such ("7", never "07", " 7" or "+7": the ledger's canonical form)."""
    text = str(key) if isinstance(key, str | int) and not isinstance(key, bool) else ""
    if not (text.isascii() and text.isdigit() and str(int(text)) == text):
        raise PolicyError(f"{bank}: PCR index {key!r} is not a decimal integer")
    pcr = int(text)
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
