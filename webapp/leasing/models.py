from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from ledger.units import datetime_of_ms, ms_of
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
    terms = models.JSONField(
        default=dict, blank=True, help_text="the lease terms in force, as the ledger records them"
    )
    price_total_micro = models.BigIntegerField(
        null=True, blank=True, help_text="the quotes: capacity + planned energy (docs/billing.md)"
    )
    reason = models.TextField(blank=True, help_text="why it was cancelled, preempted or failed")
    created = models.DateTimeField(auto_now_add=True)
    state_changed = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    interval_started = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when the current terms began: the start, or the last migration",
    )
    ended = models.DateTimeField(null=True, blank=True)
    # The intervals before moves whose lines are still to come, oldest first: each line is
    # settled once quotes attest its old GPUs' readings past the move (docs/billing.md,
    # "Migration"), by the worker that settles closed leases. [{gpus, terms, until_ms}]
    unsettled_moves = models.JSONField(default=list, blank=True)
    # The cluster's grant of the lease (webapp/cluster): who holds it there, the grant on
    # each node ([{node, handle, gpus}]: a Slurm job id and the GPU uuids it holds), when
    # the GPUs became usable (the terms start there: billing starts when access does) and
    # when the grant was confirmed gone.
    cluster_user = models.CharField(max_length=32, blank=True)
    grants = models.JSONField(default=list, blank=True)
    granted = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["state"]), models.Index(fields=["tenant", "-created"])]

    @property
    def ended_ms(self) -> int | None:
        """When the lease let its GPUs go, in ms: where its final line ends, and the end_ms
        the ledger's EndLease records (GPU time before it stays this lease's)."""
        return None if self.ended is None else ms_of(self.ended)

    def lines_to_come(self) -> list[dict[str, Any]]:
        """Each move whose line before it is still to be settled: when it moved, and the
        generation whose terms that line is priced at."""
        return [
            {
                "until": datetime_of_ms(move["until_ms"]),
                "generation": move["terms"]["generation"],
            }
            for move in self.unsettled_moves
        ]

    def __str__(self) -> str:
        return f"lease {self.pk} ({self.tenant}, {self.gpu_count}×{self.precision}, {self.state})"


class Settlement(models.Model):
    """One bill line: an interval of a lease (a migration closes one and opens the next),
    as the scheduler computed it and the ledger's contract re-checked it (docs/billing.md)."""

    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="settlements")
    seq = models.PositiveSmallIntegerField()
    generation = models.CharField(max_length=50)
    start_ms = models.BigIntegerField()
    end_ms = models.BigIntegerField()
    final = models.BooleanField(default=False, help_text="the lease's last line")
    measured_energy_mj = models.BigIntegerField(help_text="GPU energy measured, all GPUs")
    tariff_micro_per_kwh = models.PositiveBigIntegerField()
    pue_milli = models.PositiveIntegerField()
    capacity_micro_per_gpu_hour = models.PositiveBigIntegerField()
    capacity_micro = models.BigIntegerField(help_text="GPU-hours held x rate")
    priced_energy_micro = models.BigIntegerField(help_text="the interval's prepaid energy")
    measured_energy_micro = models.BigIntegerField(help_text="measured energy x PUE x tariff")
    settlement_micro = models.BigIntegerField(help_text="measured - priced energy")
    total_micro = models.BigIntegerField(help_text="capacity + measured energy")
    telemetry_digest = models.CharField(max_length=64)
    telemetry_batches = models.JSONField(
        default=list, help_text="[{gpu, digest, rows}]: the attested batches the line measured"
    )
    gpus = models.JSONField(default=list, help_text="the GPU uuids the line measured")
    created = models.DateTimeField(auto_now_add=True)
    ledger_tx = models.CharField(max_length=100, blank=True)
    ledger_block = models.BigIntegerField(null=True, blank=True)
    validation_code = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["lease", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["lease", "seq"], name="settlement_unique_seq")
        ]

    def __str__(self) -> str:
        return f"bill line {self.lease_id}#{self.seq}: {self.total_micro} µ"
