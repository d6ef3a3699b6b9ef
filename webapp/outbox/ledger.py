"""The ledger client this process uses, built once from settings, and the one read a
process that does not own it makes (`approved_policy`).

Embedded: this process owns the ledger file (one engine per file), so only the relay
(`manage.py ledger_relay`, or the demo loop) opens it. Fabric: issue 5's Gateway backend.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chaincode_client.governance import policy_record
from chaincode_client.interface import LedgerClient, LedgerError
from ledger.canonical import loads
from ledger.contract.governance import DEFAULT_KEY, policy_key
from ledger.engine.store import SqliteState

_lock = threading.Lock()
_client: LedgerClient | None = None


def _embedded() -> LedgerClient:
    from chaincode_client.embedded import EmbeddedClient
    from ledger.engine import EmbeddedLedger, Identity

    settings.LEDGER_PATH.parent.mkdir(parents=True, exist_ok=True)
    ledger = EmbeddedLedger.open(settings.LEDGER_PATH, orgs=settings.LEDGER_ORGS)
    identity_dir = settings.LEDGER_PATH.with_suffix(".identity")
    if (identity_dir / "cert.pem").exists():
        identity = Identity.load(identity_dir)
    else:
        identity = ledger.enroll(settings.LEDGER_ORG, "wattlease-relay")
        identity.save(identity_dir)
    return EmbeddedClient(ledger, identity)


def _fabric() -> LedgerClient:
    """The Fabric Gateway backend from FABRIC_* variables (docs/operations.md)."""
    from chaincode_client.fabric.client import FabricGatewayClient
    from chaincode_client.fabric.config import ConfigError

    try:
        return FabricGatewayClient.from_env()
    except ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None


def use_local_fabric(base_port: int, log=print):  # type: ignore[no-untyped-def]
    """Bring up (or find running) the loopback Fabric network under the data folder and
    point this process's ledger client at it as LEDGER_ORG's application (and, unless
    LEDGER_TRUST_ROOTS names some, its console at the network's trust roots). Returns the
    network, so its owner (the demo) can take it down."""
    from chaincode_client.fabric_network.layout import Layout, NetworkError
    from chaincode_client.fabric_network.network import Network
    from chaincode_client.fabric_network.roots import roots_pem

    try:
        network = Network.create(
            Layout(settings.DATA_DIR / "fabric-network", base_port=base_port), log=log
        )
        network.up()
    except NetworkError as exc:
        raise ImproperlyConfigured(f"the local Fabric network did not come up: {exc}") from None
    os.environ.update(network.layout.client_env(settings.LEDGER_ORG))
    if not settings.LEDGER_TRUST_ROOTS:  # what the console audits bills with
        roots = settings.DATA_DIR / "fabric-network" / "channel-roots.pem"
        roots.write_text(roots_pem(network.layout))
        settings.LEDGER_TRUST_ROOTS = str(roots)
    settings.LEDGER_BACKEND = "fabric"
    close_ledger_client()
    return network


def ledger_client() -> LedgerClient:
    global _client
    with _lock:
        if _client is None:
            _client = _embedded() if settings.LEDGER_BACKEND == "embedded" else _fabric()
        return _client


def close_ledger_client() -> None:
    from chaincode_client.embedded import EmbeddedClient

    global _client
    with _lock:
        if _client is not None:
            _client.close()
            if isinstance(_client, EmbeddedClient):  # this process owns the engine: close it
                _client.engine.close()
            _client = None


def approved_policy(kind: str, key: str = DEFAULT_KEY) -> dict[str, Any] | None:
    """The policy record both organisations approved for (kind, key) (document, version,
    proposer, approver), or None when the channel has none. Raises LedgerError when the
    ledger cannot be read. On the embedded ledger the state key is read from the ledger file
    read-only, as a peer reads it (only the relay's process owns the engine); on Fabric, with
    GetPolicy through this process's client (chaincode_client.governance.policy_record)."""
    if settings.LEDGER_BACKEND == "embedded":
        if not settings.LEDGER_PATH.exists():
            return None
        try:
            state = SqliteState(settings.LEDGER_PATH)
            try:
                row = state.get(policy_key(kind, key))
            finally:
                state.close()
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot read {settings.LEDGER_PATH}: {exc}") from None
        return None if row is None else dict(loads(row[0]))
    return policy_record(ledger_client(), kind, key)
