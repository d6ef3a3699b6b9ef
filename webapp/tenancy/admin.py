"""The operator's pages for tenants, their keys and members. Every save goes through the
tenancy actions (one transaction, one audit row), inline rows included."""

from __future__ import annotations

from django.contrib import admin

from webapp.core.admin import DeletesThroughAction
from webapp.core.secrets_page import show_once
from webapp.tenancy import actions
from webapp.tenancy.actions import issue_api_key, revoke_api_key
from webapp.tenancy.models import ApiKey, Membership, Tenant

SAVE = {
    Tenant: actions.save_tenant,
    ApiKey: actions.save_api_key,
    Membership: actions.save_membership,
}
DELETE = {Membership: actions.remove, ApiKey: actions.remove}


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "scope", "expires", "revoked", "created", "last_used")
    readonly_fields = ("prefix", "revoked", "created", "last_used")  # revoke: the key's page
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False  # keys are issued with the action below, so the secret can be shown once


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role", "created")
    readonly_fields = ("created",)
    autocomplete_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    list_display = ("name", "slug", "max_gpus", "max_queued_requests", "max_priority", "created")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("created",)
    inlines = [MembershipInline, ApiKeyInline]
    actions = ["issue_write_key"]

    @admin.action(description="Issue a read/write API key (shown once)")
    def issue_write_key(self, request, queryset):
        actor = str(request.user)
        issued = [
            (
                str(tenant),
                issue_api_key(tenant, scope=ApiKey.WRITE, name=f"issued by {actor}", actor=actor)[
                    1
                ],
            )
            for tenant in queryset
        ]
        return show_once(request, "New API keys", issued)

    def save_model(self, request, obj, form, change):
        actions.save_tenant(obj, actor=str(request.user))

    def save_formset(self, request, form, formset, change):
        """The inline keys and members, each saved or removed by its action."""
        actor = str(request.user)
        instances = formset.save(commit=False)
        for obj in formset.deleted_objects:
            DELETE[type(obj)](obj, actor=actor)
        for obj in instances:
            SAVE[type(obj)](obj, actor=actor)


@admin.register(ApiKey)
class ApiKeyAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    list_display = ("__str__", "tenant", "scope", "expires", "revoked", "last_used")
    list_filter = ("scope", "revoked", "tenant")
    search_fields = ("prefix", "tenant__name", "name")
    readonly_fields = ("prefix", "digest", "revoked", "created", "last_used")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke (the key stops working at once)")
    def revoke(self, request, queryset):
        for key in queryset:
            revoke_api_key(key, actor=str(request.user))
        self.message_user(request, f"revoked {queryset.count()} key(s)")

    def save_model(self, request, obj, form, change):
        actions.save_api_key(obj, actor=str(request.user))


@admin.register(Membership)
class MembershipAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    list_display = ("user", "tenant", "role", "created")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__name")
    autocomplete_fields = ("user", "tenant")
    readonly_fields = ("created",)

    def save_model(self, request, obj, form, change):
        actions.save_membership(obj, actor=str(request.user))
