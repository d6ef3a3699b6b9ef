"""The channel's trust roots for an auditor: each organisation's root CA certificate.

An auditor checks a Fabric receipt (`python -m ledger verify-receipt FILE --trust ROOTS.pem`)
against the roots of the channel it was told to trust, never against certificates the receipt
carries. They are the CA certificates each organisation published (`public/<MSP>/msp/cacerts`:
its own Fabric CA's), the same ones the channel's configuration holds; on an organisation's
own host, the others' are the copies it was handed.
"""

from __future__ import annotations

from pathlib import Path

from chaincode_client.fabric_network.layout import ORDERER_MSP, Layout, NetworkError
from ledger.audit.fabric_trust import format_roots


def _cacert(msp_dir: Path) -> bytes:
    certs = sorted((msp_dir / "cacerts").glob("*.pem"))
    if len(certs) != 1:
        raise NetworkError(f"expected one CA certificate in {msp_dir / 'cacerts'}, found {certs}")
    return certs[0].read_bytes()


def roots_pem(layout: Layout, chaincode: str | None = None) -> str:
    """The roots file (`ledger.audit.fabric_trust` format) of the network laid out by `layout`, for
    receipts of `chaincode` (default: the layout's Wattlease chaincode)."""
    orderers = {ORDERER_MSP: _cacert(layout.public_dir(ORDERER_MSP) / "msp")}
    orgs = {org.msp_id: _cacert(layout.public_dir(org.msp_id) / "msp") for org in layout.orgs}
    return format_roots(layout.channel, chaincode or layout.chaincode, orderers, orgs)
