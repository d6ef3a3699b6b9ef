from collections.abc import Callable

from django.contrib import admin

from webapp.core.models import AuditEvent


class Evidence:
    """ModelAdmin mixin for evidence and records the system keeps (audit rows, quotes,
    attested readings, bill lines, rollups): an operator reads them, never adds, edits or
    deletes one (an edited batch would no longer hash; a deleted quote would unbill a line)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(Evidence, admin.ModelAdmin):
    list_display = ("created", "actor", "action", "object_type", "object_id")
    list_filter = ("action", "object_type")
    search_fields = ("actor", "object_id", "action")
    readonly_fields = ("created", "actor", "action", "object_type", "object_id", "data")


class DeletesThroughAction:
    """ModelAdmin mixin: deleting one row or a selection calls the app's `remove_action`
    (`remove_action(obj, actor=...)`: one transaction, one audit row each), never the ORM."""

    remove_action: Callable[..., None]

    def delete_model(self, request, obj):
        type(self).remove_action(obj, actor=str(request.user))

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            type(self).remove_action(obj, actor=str(request.user))
