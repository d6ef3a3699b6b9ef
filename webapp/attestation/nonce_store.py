"""attest's NonceStore backed by the database, so nonces survive restarts and are shared by
every server process."""

from __future__ import annotations

from django.db import connection

from attest.nonces import NonceRecord
from webapp.attestation.models import Nonce


class DbNonceStore:
    def put(self, record: NonceRecord) -> None:
        Nonce.objects.create(
            value=record.nonce.hex(), subject=record.subject, expires_at=record.expires_at
        )

    def take(self, nonce: bytes) -> NonceRecord | None:
        """Mark the nonce consumed and return it, in one statement: of two requests with the
        same nonce, one gets it. None: never issued, expired and purged, or already taken."""
        with connection.cursor() as cursor:
            cursor.execute(  # the ORM's update() cannot return the row it changed
                f"UPDATE {Nonce._meta.db_table} SET consumed = %s "
                "WHERE value = %s AND NOT consumed RETURNING subject, expires_at",
                [True, nonce.hex()],
            )
            row = cursor.fetchone()
        return None if row is None else NonceRecord(nonce, row[0], row[1])

    def was_consumed(self, nonce: bytes) -> bool:
        return Nonce.objects.filter(value=nonce.hex(), consumed=True).exists()

    def purge_expired(self, now: float) -> int:
        return Nonce.objects.filter(expires_at__lt=now).delete()[0]
