from django.contrib import admin

from webapp.outbox.models import OutboxEntry


@admin.register(OutboxEntry)
class OutboxEntryAdmin(admin.ModelAdmin):
    list_display = (
        "business_key",
        "function",
        "status",
        "attempts",
        "validation_code",
        "block_number",
        "created",
    )
    list_filter = ("status", "function", "validation_code")
    search_fields = ("business_key", "tx_id")
    readonly_fields = [f.name for f in OutboxEntry._meta.fields]

    def has_add_permission(self, request):
        return False
