from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from attest.errors import PolicyError
from attest.policy import PcrPolicy as Parsed


class Generation(models.Model):
    """A GPU generation and form factor, copied from the versioned catalogue data file."""

    catalogue_id = models.CharField(max_length=50, unique=True)
    catalogue_version = models.CharField(max_length=20)
    family = models.CharField(max_length=20)
    architecture = models.CharField(max_length=40)
    form_factor = models.CharField(max_length=20)
    board_power_w = models.DecimalField(max_digits=8, decimal_places=2)
    memory_gb = models.DecimalField(max_digits=8, decimal_places=2)
    memory_bandwidth_gbs = models.DecimalField(max_digits=10, decimal_places=2)
    dense_tflops = models.JSONField(help_text="precision -> dense peak TFLOPS (decimal strings)")
    sparse_tflops = models.JSONField(default=dict, blank=True)
    source = models.TextField()

    class Meta:
        ordering = ["family", "catalogue_id"]

    def __str__(self) -> str:
        return self.catalogue_id

    def watts_per_dense_tflops(self, precision: str = "FP16") -> Decimal | None:
        tflops = self.dense_tflops.get(precision)
        return None if tflops is None else self.board_power_w / Decimal(tflops)


class Site(models.Model):
    """A data centre. Its PUE and energy tariff are not kept here: they are the rate card's
    (ledger data both organisations approve), found by the site's name
    (webapp/fleet/rate_card.py `site_rates`); a site the card does not name is not leased."""

    name = models.CharField(max_length=100, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PcrPolicy(models.Model):
    """Golden PCR values a node must report, and how old its last good quote may be."""

    name = models.CharField(max_length=100, unique=True)
    pcrs = models.JSONField(help_text='{"sha256": {"0": "<hex>", "2": "<hex>", "7": "<hex>"}}')
    max_age_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="seconds a good quote keeps a node leasable; empty: ATTESTATION_MAX_AGE_S",
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "PCR policy"
        verbose_name_plural = "PCR policies"

    def __str__(self) -> str:
        return self.name

    def effective_max_age_s(self) -> int:
        """The policy's own age limit, or the deployment's ATTESTATION_MAX_AGE_S."""
        return self.max_age_s or settings.ATTESTATION_MAX_AGE_S

    def clean(self) -> None:
        """The ledger's rule (attest.policy), less completeness: a draft may leave golden
        values null until an operator records them; a node enrols only once there are none
        (attestation's enrolment asks `ledger_problems`)."""
        try:
            parsed = Parsed.from_json({"pcrs": self.pcrs})
        except PolicyError as exc:
            raise ValidationError({"pcrs": str(exc)}) from None
        unsupported = parsed.unsupported_banks()
        if unsupported:
            raise ValidationError({"pcrs": unsupported})


class Node(models.Model):
    ENROLLING = "enrolling"
    ACTIVE = "active"
    QUARANTINED = "quarantined"
    STATUSES = [(ENROLLING, "enrolling"), (ACTIVE, "active"), (QUARANTINED, "quarantined")]

    UNKNOWN = "unknown"
    TRUSTED = "trusted"
    FAILED = "failed"
    STALE = "stale"
    TRUST_STATES = [
        (UNKNOWN, "unknown"),
        (TRUSTED, "trusted"),
        (FAILED, "failed"),
        (STALE, "stale"),
    ]

    name = models.CharField(max_length=100, unique=True)
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="nodes")
    pcr_policy = models.ForeignKey(PcrPolicy, on_delete=models.PROTECT, related_name="nodes")
    status = models.CharField(max_length=12, choices=STATUSES, default=ENROLLING)
    trust = models.CharField(max_length=8, choices=TRUST_STATES, default=UNKNOWN)
    tpm_tcti = models.CharField(max_length=200, blank=True, help_text="where the agent's TPM is")
    ak_public = models.BinaryField(null=True, blank=True, editable=False)
    ak_name = models.CharField(max_length=70, blank=True, editable=False)
    last_good_attestation = models.DateTimeField(null=True, blank=True, editable=False)
    ek_name = models.CharField(max_length=70, blank=True, editable=False)
    credential_prefix = models.CharField(max_length=16, blank=True, editable=False)
    credential_digest = models.CharField(max_length=64, blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GPU(models.Model):
    uuid = models.CharField(max_length=64, unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    generation = models.ForeignKey(Generation, on_delete=models.PROTECT, related_name="gpus")

    class Meta:
        ordering = ["node", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node}/{self.index} {self.generation}"


class TelemetrySample(models.Model):
    """One reading of one GPU (NVML or a replayed trace), in the scheduler's integer units:
    the one place readings are stored. The key is (GPU, instant): a reading sent twice is
    stored once. On PostgreSQL the table is partitioned by day on `t_ms`
    (webapp/fleet/partitions.py) and a day's partition is dropped after
    TELEMETRY_RETENTION_DAYS (webapp/leasing/retention.py); the readings a bill line cites
    are first copied to their batch's evidence (docs/operations.md, "Telemetry retention").
    Compute utilisation is never shown without memory-bandwidth utilisation beside it:
    utilisation alone is not throughput."""

    pk = models.CompositePrimaryKey("gpu", "t_ms")
    gpu = models.ForeignKey(GPU, on_delete=models.PROTECT, related_name="samples")
    t_ms = models.BigIntegerField(help_text="Unix time, milliseconds")
    energy_mj = models.PositiveBigIntegerField(help_text="total-energy counter, millijoules")
    power_mw = models.PositiveIntegerField()
    util_gpu_pct = models.PositiveSmallIntegerField(help_text="share of time a kernel ran")
    util_mem_pct = models.PositiveSmallIntegerField(help_text="memory-bandwidth utilisation")
    temp_c = models.SmallIntegerField()

    class Meta:
        ordering = ["-t_ms"]
        indexes = [models.Index(fields=["t_ms"], name="sample_t_ms")]


class GpuHour(models.Model):
    """One GPU's telemetry in one UTC hour, summed (scheduler.advice.HourTotals), kept by
    whoever stores samples (webapp.fleet.telemetry.record_samples): the dashboards' time
    series and the idle heat map read these, a month of them, not the raw samples."""

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="hours")
    hour_ms = models.BigIntegerField(help_text="start of the UTC hour, Unix ms")
    samples = models.PositiveIntegerField()
    idle = models.PositiveIntegerField(help_text="samples under the idle utilisation threshold")
    util_sum = models.PositiveBigIntegerField(help_text="sum of util_gpu_pct")
    mem_sum = models.PositiveBigIntegerField(help_text="sum of util_mem_pct")
    power_mw_sum = models.PositiveBigIntegerField(help_text="sum of power_mw")
    temp_sum = models.BigIntegerField(null=True, help_text="sum of temp_c (null: rolled up before)")
    temp_max = models.SmallIntegerField(null=True, help_text="hottest reading, °C")

    class Meta:
        ordering = ["-hour_ms"]
        indexes = [models.Index(fields=["hour_ms"])]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "hour_ms"], name="one_row_per_gpu_hour")
        ]

    def __str__(self) -> str:
        return f"{self.gpu} @ {self.hour_ms}"


class PoolHour(models.Model):
    """One pool's telemetry in one UTC hour: the GpuHour rows of a site's GPUs of one
    generation, summed (webapp/fleet/rollups.py). The fleet's, a site's and a generation's
    views read these: a few dozen rows per hour however many GPUs the fleet has."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="hours")
    generation = models.ForeignKey(Generation, on_delete=models.CASCADE, related_name="hours")
    hour_ms = models.BigIntegerField(help_text="start of the UTC hour, Unix ms")
    gpus = models.PositiveIntegerField(help_text="GPUs that reported in the hour")
    samples = models.PositiveBigIntegerField()
    idle = models.PositiveBigIntegerField(help_text="samples under the idle utilisation threshold")
    util_sum = models.PositiveBigIntegerField(help_text="sum of util_gpu_pct")
    mem_sum = models.PositiveBigIntegerField(help_text="sum of util_mem_pct")
    power_mw_sum = models.PositiveBigIntegerField(help_text="sum of power_mw")
    gpu_power_mw = models.PositiveBigIntegerField(
        help_text="sum over the GPUs of each one's mean power in the hour (mW): the pool's draw"
    )
    temp_max = models.SmallIntegerField(null=True, help_text="hottest reading, °C")

    class Meta:
        ordering = ["-hour_ms"]
        indexes = [models.Index(fields=["hour_ms"], name="poolhour_hour_ms")]
        constraints = [
            models.UniqueConstraint(
                fields=["site", "generation", "hour_ms"], name="one_row_per_pool_hour"
            )
        ]

    def __str__(self) -> str:
        return f"{self.site}/{self.generation} @ {self.hour_ms}"


class RolledUp(models.Model):
    """How far the pool rollups go: every closed hour before `through_ms` is in PoolHour
    (one row, webapp/fleet/rollups.py; an hour without readings has no PoolHour row, so the
    newest row cannot say it)."""

    through_ms = models.BigIntegerField(help_text="end of the hours rolled up, Unix ms")

    def __str__(self) -> str:
        return f"pool rollups through {self.through_ms}"
