from __future__ import annotations

from django.db import models

from webapp.fleet.models import Node


class Attestation(models.Model):
    """One verdict on one quote from one node, with the evidence it was reached from."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="attestations")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    nonce = models.CharField(max_length=128, unique=True)
    valid = models.BooleanField()
    reasons = models.JSONField(default=list, blank=True, help_text="[{code, detail, severity}]")
    quote = models.BinaryField()
    signature = models.BinaryField()
    pcr_values = models.JSONField(default=dict)
    clock = models.JSONField(default=dict, blank=True)
    ledger_tx = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.node} {'valid' if self.valid else 'INVALID'} @ {self.created:%H:%M:%S}"
