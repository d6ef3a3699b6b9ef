"""The demo's two organisations decide its policies on the ledger, as their admins would:
the EK roots (the swtpm's EK CA, made at run time), the registrar keys and the PCR policy are
proposed by one organisation's admin and approved by the other's, two transactions by two
identities.

Demo (and test) only: in a real deployment each organisation's admin holds its own key and
submits from its own machine (chaincode_client.governance.decide with one admin client
each); this process holds both admins' keys only because the demo plays both organisations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from django.conf import settings

from attest.registrar_service import RegistrarClient
from chaincode_client.governance import decide
from chaincode_client.interface import LedgerClient
from ledger.contract.ek_binding import EK_ROOTS_KEY, REGISTRARS_KEY
from ledger.contract.governance import REGISTRARS_KIND
from webapp.attestation.actions import load_ca_certificates
from webapp.fleet.models import PcrPolicy
from webapp.outbox.ledger import ledger_client
from webapp.outbox.records import pcr_policy_document, pcr_policy_id

FABRIC_ADMIN_USER = "Admin"  # Admin@<org domain> from its own Fabric CA: NodeOU admin


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

        chaincode = ledger_client().chaincode  # type: ignore[attr-defined]
        clients = [
            FabricGatewayClient.from_env(
                {
                    **network.layout.client_env(org.msp_id, FABRIC_ADMIN_USER),
                    "FABRIC_CHAINCODE": chaincode,  # the app's contract, wherever it runs
                }
            )
            for org in network.layout.orgs
        ]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def approve_fleet_policies(clients: list[LedgerClient], policy: PcrPolicy) -> None:
    """The EK CAs this deployment trusts (TPM_EK_CA_DIR: the demo's swtpm CA) as the
    channel's EK roots, each organisation's registrar key (REGISTRARS), and the fleet's PCR
    policy."""
    pems = [cert.public_bytes(Encoding.PEM).decode() for cert in load_ca_certificates()]
    proposer, approver = clients[0], clients[1]
    decide(proposer, approver, "ek_roots", EK_ROOTS_KEY, {"certificates": pems})
    if settings.REGISTRARS:  # each organisation's registrar key, as its registrar states it
        keys = {
            org: RegistrarClient(org, url).public_key() for org, url in settings.REGISTRARS.items()
        }
        decide(proposer, approver, REGISTRARS_KIND, REGISTRARS_KEY, {"keys": keys})
    decide(proposer, approver, "pcr_policy", pcr_policy_id(policy), pcr_policy_document(policy))
