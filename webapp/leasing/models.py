from __future__ import annotations

import uuid

from django.db import models

from scheduler.catalogue import PRECISIONS as CATALOGUE_PRECISIONS
from webapp.fleet.models import GPU
from webapp.leasing import states
from webapp.tenancy.models import Tenant

PRECISIONS = [(p, p) for p in CATALOGUE_PRECISIONS]  # the catalogue's list, one place
PRECISION_MAX_CHARS = 12


class Lease(models.Model):
    """A tenant's lease of GPUs. `state` changes only through webapp.leasing.actions."""

    ledger_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="leases")
    state = models.CharField(max_length=10, choices=states.CHOICES, default=states.REQUESTED)
    gpu_count = models.PositiveSmallIntegerField()
    precision = models.CharField(max_length=PRECISION_MAX_CHARS, choices=PRECISIONS, default="FP16")
    hours = models.DecimalField(max_digits=8, decimal_places=2)
    priority = models.SmallIntegerField(default=0)
    single_node = models.BooleanField(default=True)
    min_memory_gb = models.PositiveIntegerField(default=0)
    gpus = models.ManyToManyField(GPU, blank=True, related_name="leases")
    attestations = models.ManyToManyField(
        "attestation.Attestation",
        blank=True,
        related_name="leases",
        help_text="the quotes the lease was placed on",
    )
    price = models.JSONField(default=dict, blank=True, help_text="the pricing breakdown")
    price_total_micro = models.BigIntegerField(null=True, blank=True)
    attributed_energy_mj = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="why it was cancelled, preempted or failed")
    created = models.DateTimeField(auto_now_add=True)
    state_changed = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    interval_started = models.DateTimeField(
        null=True,
        blank=True,
        help_text="start of the interval not yet settled (moves on migration)",
    )
    ended = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["state"]), models.Index(fields=["tenant", "-created"])]

    def __str__(self) -> str:
        return f"lease {self.pk} ({self.tenant}, {self.gpu_count}×{self.precision}, {self.state})"


class Settlement(models.Model):
    """The difference between the energy a lease was priced at and the energy it drew, for
    one interval (a migration closes one interval and opens the next), priced."""

    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="settlements")
    seq = models.PositiveSmallIntegerField()
    generation = models.CharField(max_length=50)
    attributed_energy_mj = models.BigIntegerField()
    measured_energy_mj = models.BigIntegerField()
    tariff_micro_per_kwh = models.PositiveBigIntegerField()
    amount_micro = models.BigIntegerField(help_text="(measured - attributed) × tariff")
    telemetry_digest = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)
    ledger_tx = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["lease", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["lease", "seq"], name="settlement_unique_seq")
        ]

    def __str__(self) -> str:
        return f"settlement {self.lease_id}#{self.seq}: {self.amount_micro} µ"
