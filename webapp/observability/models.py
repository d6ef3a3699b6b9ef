from __future__ import annotations

from django.db import models

from webapp.outbox.models import OutboxEntry

TRACEPARENT_MAX_CHARS = 55  # W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>


class OutboxTrace(models.Model):
    """The trace an outbox row was queued in, so the relay's ledger submission (another
    process, later) joins the request's trace. Written only while tracing is on."""

    entry = models.OneToOneField(
        OutboxEntry, on_delete=models.CASCADE, primary_key=True, related_name="trace"
    )
    traceparent = models.CharField(max_length=TRACEPARENT_MAX_CHARS)

    def __str__(self) -> str:
        return f"outbox row {self.entry_id} in {self.traceparent}"
