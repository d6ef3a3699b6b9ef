"""attest's NonceStore backed by the database, so nonces survive restarts and are shared by
every server process."""

from __future__ import annotations

from django.db import transaction

from attest.nonces import NonceRecord
from webapp.attestation.models import Nonce


class DbNonceStore:
    def put(self, record: NonceRecord) -> None:
        Nonce.objects.create(
            value=record.nonce.hex(), subject=record.subject, expires_at=record.expires_at
        )

    def take(self, nonce: bytes) -> NonceRecord | None:
        with transaction.atomic():
            claimed = Nonce.objects.filter(value=nonce.hex(), consumed=False).update(consumed=True)
            if not claimed:  # never issued, expired and purged, or another request got it
                return None
            row = Nonce.objects.get(value=nonce.hex())
        return NonceRecord(nonce, row.subject, row.expires_at)

    def was_consumed(self, nonce: bytes) -> bool:
        return Nonce.objects.filter(value=nonce.hex(), consumed=True).exists()

    def purge_expired(self, now: float) -> int:
        return Nonce.objects.filter(expires_at__lt=now).delete()[0]
