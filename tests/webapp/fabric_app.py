"""The web app on a real Fabric network, for the tests that run it there: its ledger client
as Org1's application (tests/webapp/conftest.py's `ledger` is the embedded engine's; their
`ledger_admins` come from webapp.demo.governance.admin_clients(network))."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chaincode_client.interface import LedgerClient
from webapp.outbox.ledger import close_ledger_client, ledger_client


@contextmanager
def app_on_fabric(
    settings: Any, network: Any, monkeypatch: pytest.MonkeyPatch, chaincode: str | None = None
) -> Iterator[LedgerClient]:
    """The app's ledger client on `network` (on `chaincode`, a contract namespace of its own,
    when given), closed afterwards."""
    env = network.layout.client_env("Org1MSP")
    if chaincode is not None:
        env["FABRIC_CHAINCODE"] = chaincode
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings.LEDGER_BACKEND = "fabric"
    close_ledger_client()
    try:
        yield ledger_client()
    finally:
        close_ledger_client()
