from django.contrib import admin, messages

from webapp.outbox.actions import RetryRefused, retry_entry
from webapp.outbox.models import OutboxEntry


class DeadLetterFilter(admin.SimpleListFilter):
    """Rows the relay gave up on (rejected) or keeps failing on (backing off after errors)."""

    title = "dead letters"
    parameter_name = "dead"

    def lookups(self, request, model_admin):
        return [("rejected", "rejected by the ledger"), ("failing", "failing, backing off")]

    def queryset(self, request, queryset):
        if self.value() == "rejected":
            return queryset.filter(status=OutboxEntry.REJECTED)
        if self.value() == "failing":
            return queryset.filter(status=OutboxEntry.PENDING).exclude(last_error="")
        return queryset


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
        "last_error",
    )
    list_filter = (DeadLetterFilter, "status", "function", "validation_code")
    actions = ["retry"]
    search_fields = ("business_key", "tx_id")
    readonly_fields = [f.name for f in OutboxEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a queued row is a ledger write still owed; a sent one, its record

    @admin.action(description="Send again on the relay's next pass")
    def retry(self, request, queryset):
        retried = 0
        for entry in queryset:
            try:
                retry_entry(entry, actor=str(request.user))
                retried += 1
            except RetryRefused as refused:
                self.message_user(request, str(refused), messages.ERROR)
        self.message_user(request, f"{retried} row(s) queued again")
