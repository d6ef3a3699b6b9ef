"""The verdict of re-deriving each bill line, computed server-side by the auditor a tenant
runs on its own (`ledger.audit.bill`, not a copy): on the receipts the API serves, the
readings it serves and the channel's trust roots (settings.LEDGER_TRUST_ROOTS, or the
embedded ledger's organisation CAs). The verdict is shown beside the line with the command
that re-derives it away from this server (docs/billing.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from ledger.audit.bill import Auditor, LineVerdict
from ledger.audit.receipt_trust import TrustAnchors, load_trust
from ledger.engine.core import msp_dir_for
from ledger.engine.msp import org_ca_certs
from webapp.leasing import bills
from webapp.leasing.models import Lease, Settlement
from webapp.leasing.receipts import ReceiptUnavailable, lease_receipt

AUDIT_COMMAND = (
    "wattlease ledger audit-bill BILL.json --receipts RECEIPTS --trust ROOTS.pem "
    "--tenant TENANT --readings READINGS"
)
VERIFIED, FAILED, PENDING, UNCHECKED = "verified", "failed", "pending", "unchecked"


class TrustUnavailable(Exception):
    """No trust roots are configured for this ledger; the message says what to set."""


def trust_anchors() -> TrustAnchors:
    if settings.LEDGER_TRUST_ROOTS:
        try:
            return load_trust(Path(settings.LEDGER_TRUST_ROOTS))
        except (OSError, ValueError) as exc:
            raise TrustUnavailable(f"LEDGER_TRUST_ROOTS: {exc}") from None
    if settings.LEDGER_BACKEND == "embedded":
        try:
            orgs = org_ca_certs(msp_dir_for(settings.LEDGER_PATH))
        except OSError as exc:
            raise TrustUnavailable(f"the ledger's organisation CAs: {exc}") from None
        return TrustAnchors(orgs, None, "the embedded ledger's roots hold no orderer")
    raise TrustUnavailable(
        "set LEDGER_TRUST_ROOTS to the channel's roots file "
        "(python -m chaincode_client.fabric_network roots)"
    )


def add_verdicts(lines: list[dict[str, Any]]) -> None:
    """Set each bill line's `verdict` ({"status", "reasons"}): one auditor for all of them,
    so each lease's receipt is fetched and verified once."""
    committed = []
    for line in lines:
        if line["evidence"]["tx_id"]:
            committed.append(line)
        else:  # the relay has not had it committed yet: nothing to re-derive
            line["verdict"] = {"status": PENDING, "reasons": []}
    if not committed:
        return
    try:
        trust = trust_anchors()
    except TrustUnavailable as exc:
        for line in committed:
            line["verdict"] = {"status": UNCHECKED, "reasons": [str(exc)]}
        return
    receipts, unavailable = _receipts(committed)
    auditor = Auditor(receipts.__getitem__, trust, _readings)
    for line in committed:
        if line["lease"] in unavailable:  # not a verdict on the line: the ledger did not answer
            line["verdict"] = {"status": UNCHECKED, "reasons": [unavailable[line["lease"]]]}
        else:
            line["verdict"] = _shown(auditor.line(line))


def _shown(verdict: LineVerdict) -> dict[str, Any]:
    return {"status": VERIFIED if verdict.ok else FAILED, "reasons": verdict.reasons}


def _receipts(lines: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Each line's lease's receipt, as the tenant downloads it, by ledger id; and why there is
    none for a lease whose receipt the ledger cannot give now."""
    receipts, unavailable = {}, {}
    for ledger_id, pk in {line["lease"]: line["lease_pk"] for line in lines}.items():
        try:
            receipts[ledger_id] = lease_receipt(Lease.objects.get(pk=pk))
        except ReceiptUnavailable as exc:
            unavailable[ledger_id] = f"not checked: {exc.detail}"
    return receipts, unavailable


def _readings(ledger_id: str, seq: int) -> str:
    line = Settlement.objects.filter(lease__ledger_id=ledger_id, seq=seq).first()
    if line is None:
        raise ValueError(f"no bill line {seq} of lease {ledger_id} is stored")
    return bills.readings_csv(line)
