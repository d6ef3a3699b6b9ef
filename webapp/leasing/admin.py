from django.contrib import admin

from webapp.core.admin import Evidence
from webapp.leasing.models import Lease, Settlement


class SettlementInline(admin.TabularInline):
    model = Settlement
    extra = 0
    can_delete = False
    readonly_fields = [f.name for f in Settlement._meta.fields]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    """Read-only: a lease's state changes only through the leasing actions."""

    list_display = (
        "id",
        "tenant",
        "state",
        "gpu_count",
        "precision",
        "hours",
        "priority",
        "price_total_micro",
        "created",
    )
    list_filter = ("state", "precision", "tenant")
    search_fields = ("ledger_id", "tenant__name", "gpus__uuid")
    readonly_fields = [f.name for f in Lease._meta.fields] + ["gpus"]
    inlines = [SettlementInline]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # its contract is on the ledger; its bill lines protect it


@admin.register(Settlement)
class SettlementAdmin(Evidence, admin.ModelAdmin):
    list_display = (
        "lease",
        "seq",
        "generation",
        "capacity_micro",
        "measured_energy_mj",
        "settlement_micro",
        "total_micro",
        "ledger_tx",
    )
    list_filter = ("generation",)
    search_fields = ("lease__ledger_id", "telemetry_digest", "ledger_tx")
    readonly_fields = [f.name for f in Settlement._meta.fields]
