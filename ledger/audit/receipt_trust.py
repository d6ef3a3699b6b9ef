"""The trust anchors an auditor names (`--trust`) and the one place that picks a receipt's
verifier by its format: an embedded ledger's receipt is checked against the organisations' CA
certificates (ledger.audit.receipt), a Fabric channel's (`"format": "fabric/1"`) against the
channel's roots file, orderers included (ledger.audit.fabric_receipt). Both come from the same file:
`python -m chaincode_client.fabric_network roots` (Fabric) or `python -m ledger roots`
(embedded: a folder of <MSPID>.pem, or a roots file of `org` lines)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.audit.fabric_receipt import FORMAT as FABRIC_FORMAT
from ledger.audit.fabric_receipt import check_fabric_receipt, fabric_receipt_txs
from ledger.audit.fabric_trust import RootsError, TrustRoots, parse_roots
from ledger.audit.receipt import ReceiptTx, receipt_txs, verify_receipt
from ledger.genesis import load_roots

FABRIC_ROOTS_HINT = "a Fabric receipt needs the channel's roots file, orderers included"


class TrustError(ValueError):
    """The trust anchors cannot check this receipt; the message says why."""


@dataclass(frozen=True)
class TrustAnchors:
    orgs: dict[str, bytes]  # MSP id -> CA certificate PEM: embedded receipts
    fabric: TrustRoots | None  # the roots file as a Fabric channel names it, or None ...
    no_fabric: str = ""  # ... and why

    def verify(self, receipt: Any) -> list[str]:
        """The receipt's defects under these anchors (empty: it holds), or TrustError."""
        if not is_fabric(receipt):
            return verify_receipt(receipt, self.orgs)
        if self.fabric is None:
            raise TrustError(self.no_fabric)
        return check_fabric_receipt(receipt, self.fabric)


def load_trust(path: Path) -> TrustAnchors:
    """The anchors in `path` (a roots file or a folder of <MSPID>.pem); OSError or
    ValueError naming the rule when they are unusable for any receipt."""
    orgs = load_roots(path)
    if not path.is_file():
        return TrustAnchors(orgs, None, f"--trust {path} is a folder: {FABRIC_ROOTS_HINT}")
    try:
        return TrustAnchors(orgs, parse_roots(path.read_bytes()))
    except RootsError as exc:
        return TrustAnchors(orgs, None, f"--trust {path}: {exc} ({FABRIC_ROOTS_HINT})")


def is_fabric(receipt: Any) -> bool:
    return isinstance(receipt, dict) and receipt.get("format") == FABRIC_FORMAT


def transactions(receipt: dict[str, Any]) -> dict[str, ReceiptTx]:
    """The transactions of a receipt that verified, by id, whatever its backend."""
    return fabric_receipt_txs(receipt) if is_fabric(receipt) else receipt_txs(receipt)
