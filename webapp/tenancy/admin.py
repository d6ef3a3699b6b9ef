from django.contrib import admin, messages

from webapp.tenancy.models import ApiKey, Membership, Tenant


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "scope", "expires", "revoked", "created", "last_used")
    readonly_fields = ("prefix", "created", "last_used")
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
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("created",)
    inlines = [MembershipInline, ApiKeyInline]
    actions = ["issue_write_key"]

    @admin.action(description="Issue a read/write API key (shown once)")
    def issue_write_key(self, request, queryset):
        for tenant in queryset:
            _, token = ApiKey.issue(tenant, scope=ApiKey.WRITE, name=f"issued by {request.user}")
            self.message_user(request, f"{tenant}: {token}", messages.WARNING)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("__str__", "tenant", "scope", "expires", "revoked", "last_used")
    list_filter = ("scope", "revoked", "tenant")
    search_fields = ("prefix", "tenant__name", "name")
    readonly_fields = ("prefix", "digest", "created", "last_used")

    def has_add_permission(self, request):
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__name")
    autocomplete_fields = ("user", "tenant")
    readonly_fields = ("created",)
