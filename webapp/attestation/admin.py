from django.contrib import admin

from webapp.attestation.models import Attestation, TelemetryBatch


@admin.register(Attestation)
class AttestationAdmin(admin.ModelAdmin):
    list_display = ("created", "node", "valid", "failed_checks", "ledger_tx")
    list_filter = ("valid", "node")
    search_fields = ("node__name", "nonce", "ledger_tx")
    readonly_fields = [f.name for f in Attestation._meta.fields]

    @admin.display(description="failed checks")
    def failed_checks(self, obj):
        return ", ".join(r.get("code", "?") for r in obj.reasons) or "—"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TelemetryBatch)
class TelemetryBatchAdmin(admin.ModelAdmin):
    """Readings a quote bound: evidence, never edited (an edit would no longer hash)."""

    list_display = ("gpu", "first_ms", "last_ms", "rows", "digest", "attestation")
    list_filter = ("attestation__valid",)
    search_fields = ("gpu__uuid", "digest")
    readonly_fields = [f.name for f in TelemetryBatch._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
