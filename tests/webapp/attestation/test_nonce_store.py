"""Ledger challenges as the server keeps them (DbNonceStore): each taken once."""

from __future__ import annotations

import pytest

from attest.nonces import NonceRecord
from webapp.attestation.nonce_store import DbNonceStore

NONCE = bytes(range(32))


@pytest.mark.django_db
def test_a_nonce_is_taken_once_with_its_subject_and_expiry():
    store = DbNonceStore()
    store.put(NonceRecord(NONCE, "node-1", 1_900_000_000.5))
    assert not store.was_consumed(NONCE)
    assert store.take(NONCE) == NonceRecord(NONCE, "node-1", 1_900_000_000.5)
    assert store.was_consumed(NONCE)
    assert store.take(NONCE) is None  # a second request with it gets nothing


@pytest.mark.django_db
def test_a_nonce_never_issued_is_not_taken():
    store = DbNonceStore()
    store.put(NonceRecord(NONCE, "node-1", 1_900_000_000.0))
    assert store.take(bytes(32)) is None
    assert not store.was_consumed(NONCE)  # taking another nonce left this one alone
