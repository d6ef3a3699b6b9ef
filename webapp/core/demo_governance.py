"""The demo's two organisations decide its policies on the ledger, as their admins would:
the EK roots (the swtpm's EK CA, made at run time) and the PCR policy are proposed by one
organisation's admin and approved by the other's, two transactions by two identities.

Demo only: in a real deployment each organisation's admin holds its own key and signs from
its own machine (`ledger` CLI or the peer tools); this process holds both admins' keys only
because the demo plays both organisations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from chaincode_client.interface import EndorsementError, LedgerClient
from ledger.ek_binding import EK_ROOTS_KEY
from webapp.fleet.models import PcrPolicy
from webapp.outbox.ledger import ledger_client
from webapp.outbox.records import pcr_policy_document, pcr_policy_id

FABRIC_ADMIN_USER = "Admin"  # cryptogen's Admin@<org domain>: NodeOU admin


@contextmanager
def admin_clients(network: Any = None) -> Iterator[list[LedgerClient]]:
    """One admin client per organisation: on the embedded engine this process owns, or on
    the demo's loopback Fabric network (`network`)."""
    if network is None:
        from chaincode_client.embedded import EmbeddedClient
        from ledger.engine.msp import ROLE_ADMIN

        engine = ledger_client().engine  # type: ignore[attr-defined]
        clients: list[LedgerClient] = [
            EmbeddedClient(engine, engine.enroll(org, f"Admin@{org}", ROLE_ADMIN))
            for org in settings.LEDGER_ORGS
        ]
    else:
        from chaincode_client.fabric.client import FabricGatewayClient

        clients = [
            FabricGatewayClient.from_env(network.layout.client_env(org.msp_id, FABRIC_ADMIN_USER))
            for org in network.layout.orgs
        ]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def decide(clients: list[LedgerClient], kind: str, key: str, document: dict[str, Any]) -> bool:
    """Put `document` in force for (kind, key): proposed by the first organisation's admin,
    approved by the second's. False, and nothing written, when it is already in force."""
    proposer, approver = clients[0], clients[1]
    try:
        current = json.loads(proposer.evaluate("GetPolicy", json.dumps({"kind": kind, "key": key})))
        if current["document"] == document:
            return False
    except EndorsementError:  # [governance.no_policy]: none approved yet
        pass
    request = {"kind": kind, "key": key, "document": document}
    proposal = json.loads(proposer.submit("ProposePolicy", json.dumps(request)).payload)
    approver.submit("ApprovePolicy", json.dumps({"proposal_id": proposal["proposal_id"]}))
    return True


def approve_demo_policies(
    clients: list[LedgerClient], policy: PcrPolicy, ek_ca_pems: list[str]
) -> None:
    """The EK CA the demo's swtpms are certified by, and the fleet's PCR policy."""
    decide(clients, "ek_roots", EK_ROOTS_KEY, {"certificates": ek_ca_pems})
    decide(clients, "pcr_policy", pcr_policy_id(policy), pcr_policy_document(policy))
