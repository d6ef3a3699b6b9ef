from __future__ import annotations

from django.db import models

from webapp.fleet.models import GPU, Node


class Attestation(models.Model):
    """One verdict on one quote from one node, with the evidence it was reached from."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="attestations")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    nonce = models.CharField(max_length=128, db_index=True)
    valid = models.BooleanField()
    reasons = models.JSONField(default=list, blank=True, help_text="[{code, detail, severity}]")
    quote = models.BinaryField()
    signature = models.BinaryField()
    pcr_values = models.JSONField(default=dict)
    clock = models.JSONField(default=dict, blank=True)
    ledger_tx = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["-created"]
        # a node's newest quotes, read by every new quote of the node: without it, the newest
        # valid quote of a node failing for hours is found by scanning every node's quotes
        # back to it (bench/quote_history_bench.py)
        indexes = [models.Index(fields=["node", "-created", "-id"], name="attestation_node_newest")]

    def __str__(self) -> str:
        return f"{self.node} {'valid' if self.valid else 'INVALID'} @ {self.created:%H:%M:%S}"


class TelemetryBatch(models.Model):
    """One GPU's readings between two quotes of its node, as the agent sent them with the
    quote that bound their digest (docs/billing.md, "Attested telemetry"). The readings
    themselves are stored once, in fleet.TelemetrySample: the batch is the GPU's rows from
    `first_ms` to `last_ms`, which re-hash to `digest` (webapp.attestation.telemetry.keep
    refuses a batch for which they would not). When the day holding them is dropped
    (TELEMETRY_RETENTION_DAYS) while a bill line cites the batch, its rows are copied to
    `evidence` first, so the tenant can re-derive the line as long as the line exists."""

    attestation = models.ForeignKey(Attestation, on_delete=models.PROTECT, related_name="batches")
    gpu = models.ForeignKey(GPU, on_delete=models.PROTECT, related_name="telemetry_batches")
    digest = models.CharField(max_length=64, help_text="attest.readings.gpu_digest of the rows")
    first_ms = models.BigIntegerField()
    last_ms = models.BigIntegerField()
    rows = models.PositiveIntegerField()
    evidence = models.TextField(
        blank=True,
        default="",
        help_text="empty while the readings are in fleet.TelemetrySample; the canonical "
        "CSV rows, copied here when their day is dropped while a bill line cites them",
    )

    class Meta:
        ordering = ["gpu", "first_ms"]
        indexes = [
            models.Index(fields=["gpu", "last_ms"]),
            models.Index(fields=["first_ms"], name="batch_first_ms"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} batch {self.digest[:12]} ({self.rows} readings)"

    def pk_key(self) -> tuple[int, int, int]:
        """What identifies the batch's rows: its GPU and its first and last instant."""
        return (self.gpu_id, self.first_ms, self.last_ms)


class EnrolmentSession(models.Model):
    """A credential challenge in flight: the agent must answer with the secret we wrapped
    for its EK and AK. Only the secret's digest is kept; the EK and its certificate go to the
    ledger with the registration (the EK binding every endorser checks)."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="enrolment")
    ak_public = models.BinaryField()
    ek_public = models.BinaryField(default=b"")
    ek_certificate = models.BinaryField(default=b"", blank=True)
    ak_name = models.CharField(max_length=70)
    ek_name = models.CharField(max_length=70)
    expected_digest = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)


class Nonce(models.Model):
    """Server-issued attestation nonces: single use, expiring. Consumed ones are kept until
    they expire so a replay is reported as a replay."""

    value = models.CharField(max_length=64, unique=True)
    subject = models.CharField(max_length=100)
    expires_at = models.FloatField(help_text="UNIX time")
    consumed = models.BooleanField(default=False)


class NodeEvent(models.Model):
    """Something that happened to a node's TPM or agent, for its page and its operator: a
    power loss its quote showed (attest.clock), an authorisation its TPM refused, which its
    agent reported before it stopped (attest.agent.supervise)."""

    POWER_LOSS = "tpm_power_loss"

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="events")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    code = models.CharField(max_length=40)
    detail = models.TextField(blank=True)
    reported_by_agent = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self) -> str:
        return f"{self.node} {self.code} @ {self.created:%H:%M:%S}"
