"""The attestation reads other apps share (webapp.attestation.selectors): a node's status is
its newest quote, and a new lease relies only on a valid quote the ledger recorded."""

from __future__ import annotations

from webapp.attestation import selectors
from webapp.attestation.models import Attestation


def _quote(node, *, valid: bool, ledger_tx: str = "") -> Attestation:
    return Attestation.objects.create(
        node=node,
        nonce=f"n{Attestation.objects.count()}",
        valid=valid,
        quote=b"q",
        signature=b"s",
        ledger_tx=ledger_tx,
    )


def test_a_lease_relies_on_the_newest_valid_quote_on_the_ledger(fleet):
    node = fleet.node
    assert selectors.relied_on(node) is None and selectors.latest(node) is None
    recorded = _quote(node, valid=True, ledger_tx="tx-1")
    _quote(node, valid=True)  # valid, not on the ledger yet
    failed = _quote(node, valid=False, ledger_tx="tx-3")  # on the ledger, invalid
    assert selectors.relied_on(node) == recorded
    assert selectors.latest(node) == failed  # the status shows the newest, valid or not
    assert selectors.recent(node, 2) == [failed, Attestation.objects.get(nonce="n1")]
