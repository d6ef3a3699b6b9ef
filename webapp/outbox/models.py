from __future__ import annotations

from django.db import models


class OutboxEntry(models.Model):
    """A change that must reach the ledger, written in the same DB transaction as the change
    itself. The relay claims pending rows, submits them and records the receipt. The
    business key makes the ledger transaction idempotent, so a retry never double-books."""

    PENDING = "pending"
    SENDING = "sending"
    DONE = "done"
    REJECTED = "rejected"
    STATUSES = [(PENDING, "pending"), (SENDING, "sending"), (DONE, "done"), (REJECTED, "rejected")]

    business_key = models.CharField(max_length=200, unique=True)
    function = models.CharField(max_length=50)
    args = models.JSONField(help_text="the contract function's arguments")
    status = models.CharField(max_length=8, choices=STATUSES, default=PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt = models.DateTimeField(null=True, blank=True, db_index=True)
    claimed_by = models.CharField(max_length=100, blank=True)
    last_error = models.TextField(blank=True)
    tx_id = models.CharField(max_length=100, blank=True)
    block_number = models.BigIntegerField(null=True, blank=True)
    validation_code = models.CharField(max_length=40, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    done = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created", "id"]
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"{self.function} {self.business_key} ({self.status})"
