from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from webapp.core.api.serializers import FastReadSerializer
from webapp.fleet.models import Generation
from webapp.leasing.actions import MAX_GPUS_PER_LEASE, MAX_LEASE_HOURS
from webapp.leasing.grants import grant_view
from webapp.leasing.models import PRECISIONS, Lease, Settlement


class SettlementSerializer(FastReadSerializer):
    class Meta:
        model = Settlement
        fields = [
            "seq",
            "generation",
            "start_ms",
            "end_ms",
            "final",
            "measured_energy_mj",
            "capacity_micro",
            "priced_energy_micro",
            "measured_energy_micro",
            "settlement_micro",
            "total_micro",
            "telemetry_digest",
            "ledger_tx",
            "ledger_block",
            "validation_code",
            "created",
        ]


class LeaseSerializer(FastReadSerializer):
    gpus = serializers.SlugRelatedField(many=True, read_only=True, slug_field="uuid")
    settlements = SettlementSerializer(many=True, read_only=True)
    cluster = serializers.SerializerMethodField(
        help_text="the lease's grant on the cluster: who holds it, each node's grant (its "
        "Slurm job id and GPUs) and how to run work inside it"
    )

    class Meta:
        model = Lease
        fields = [
            "id",
            "ledger_id",
            "state",
            "gpu_count",
            "precision",
            "hours",
            "priority",
            "single_node",
            "min_memory_gb",
            "gpus",
            "price",
            "terms",
            "price_total_micro",
            "reason",
            "created",
            "started",
            "ended",
            "settlements",
            "cluster",
        ]
        read_only_fields = fields  # output only: requests go through LeaseRequestSerializer

    def get_cluster(self, lease: Lease) -> dict[str, Any]:
        return grant_view(lease)


class LeaseRequestSerializer(serializers.Serializer):
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS_PER_LEASE)
    precision = serializers.ChoiceField(choices=PRECISIONS)
    hours = serializers.DecimalField(
        max_digits=8, decimal_places=2, min_value=Decimal("0.01"), max_value=MAX_LEASE_HOURS
    )
    priority = serializers.IntegerField(min_value=-100, max_value=100, default=0)
    single_node = serializers.BooleanField(default=True)
    min_memory_gb = serializers.IntegerField(min_value=0, max_value=1024, default=0)


class LeaseCreateSerializer(LeaseRequestSerializer):
    """A lease request: the priced fields, and who holds the lease on the cluster."""

    cluster_user = serializers.RegexField(
        r"^[a-z_][a-z0-9_-]{0,31}$",
        required=False,
        default="",
        help_text="the cluster (Slurm) user that holds the lease: one of the tenant's members' "
        "(default: the tenant's first owner's)",
    )


class ClusterJobSerializer(serializers.Serializer):
    """A job step that ran inside a lease's grant, from the cluster's accounting."""

    job_id = serializers.CharField()
    user = serializers.CharField()
    account = serializers.CharField()
    state = serializers.CharField()
    start = serializers.IntegerField(allow_null=True, help_text="Unix seconds")
    end = serializers.IntegerField(allow_null=True, help_text="Unix seconds")
    gpus = serializers.IntegerField()
    gpu_seconds = serializers.IntegerField()


class PricePreviewSerializer(serializers.Serializer):
    """The scheduler's answer to a lease request, placed now; nothing is written."""

    placeable = serializers.BooleanField()
    reason = serializers.CharField(help_text="why it would wait (empty when placeable)")
    generation = serializers.CharField(required=False, help_text="generation chosen")
    gpus = serializers.ListField(child=serializers.CharField(), required=False)
    planned_gpu_hours = serializers.CharField(required=False)
    preempts = serializers.IntegerField(
        required=False, help_text="running leases of lower priority it would end"
    )
    price = serializers.DictField(
        required=False,
        help_text="the scheduler's price breakdown: attributed power, PUE, energy and, per "
        "GPU, its lines (docs/scheduler.md)",
    )


class MigrateSerializer(serializers.Serializer):
    generation = serializers.SlugRelatedField(
        slug_field="catalogue_id", queryset=Generation.objects.all()
    )

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        return {"generation": values["generation"].catalogue_id}
