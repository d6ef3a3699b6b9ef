"""The operator's pages for attestation evidence, and the node page: a node's actions issue
its agent credential and revoke its AK (attestation's actions), so the Node admin lives here,
above fleet, rather than in fleet/admin.py importing upward."""

from __future__ import annotations

from django.contrib import admin

from webapp.attestation import actions
from webapp.attestation.models import Attestation, NodeEvent, TelemetryBatch
from webapp.core.admin import DeletesThroughAction, Evidence
from webapp.core.secrets_page import show_once
from webapp.fleet import actions as fleet_actions
from webapp.fleet.models import GPU, Node

CREDENTIAL_VARIABLE = "WATTLEASE_NODE_CREDENTIAL"  # what the agent reads it from


@admin.register(Attestation)
class AttestationAdmin(Evidence, admin.ModelAdmin):
    list_display = ("created", "node", "valid", "failed_checks", "ledger_tx")
    list_filter = ("valid", "node")
    search_fields = ("node__name", "nonce", "ledger_tx")
    readonly_fields = [f.name for f in Attestation._meta.fields]

    @admin.display(description="failed checks")
    def failed_checks(self, obj):
        return ", ".join(r.get("code", "?") for r in obj.reasons) or "—"


@admin.register(NodeEvent)
class NodeEventAdmin(Evidence, admin.ModelAdmin):
    """What happened to a node's TPM or agent: evidence, read only."""

    list_display = ("created", "node", "code", "reported_by_agent")
    list_filter = ("code", "reported_by_agent", "node")
    search_fields = ("node__name", "code", "detail")
    readonly_fields = [f.name for f in NodeEvent._meta.fields]


@admin.register(TelemetryBatch)
class TelemetryBatchAdmin(Evidence, admin.ModelAdmin):
    """Readings a quote bound: evidence, never edited (an edit would no longer hash)."""

    list_display = ("gpu", "first_ms", "last_ms", "rows", "digest", "attestation")
    list_filter = ("attestation__valid",)
    search_fields = ("gpu__uuid", "digest")
    readonly_fields = [f.name for f in TelemetryBatch._meta.fields]


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0


@admin.register(Node)
class NodeAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = fleet_actions.remove  # refused while the node has evidence (PROTECT)
    list_display = ("name", "site", "status", "trust", "last_good_attestation", "pcr_policy")
    list_filter = ("status", "trust", "site", "pcr_policy")
    search_fields = ("name", "ak_name", "gpus__uuid")
    readonly_fields = ("ak_name", "ek_name", "last_good_attestation", "created", "trust")
    inlines = [GPUInline]
    actions = ["issue_credential", "revoke_ak", "quarantine"]

    @admin.action(description="Issue a node agent credential (shown once)")
    def issue_credential(self, request, queryset):
        actor = str(request.user)
        issued = [
            (
                str(node),
                f"{CREDENTIAL_VARIABLE}={actions.issue_node_credential(node, actor=actor)}",
            )
            for node in queryset
        ]
        return show_once(request, "Node agent credentials", issued)

    @admin.action(description="Revoke the AK (the agent must enrol again)")
    def revoke_ak(self, request, queryset):
        for node in queryset:
            actions.revoke_ak(node, actor=str(request.user))
        self.message_user(request, f"revoked the AK of {queryset.count()} node(s)")

    @admin.action(description="Quarantine (no new leases)")
    def quarantine(self, request, queryset):
        for node in queryset:
            fleet_actions.quarantine_node(node, actor=str(request.user))
        self.message_user(request, f"quarantined {queryset.count()} node(s)")

    def save_model(self, request, obj, form, change):
        fleet_actions.save_node(obj, actor=str(request.user))  # un-quarantine included

    def save_formset(self, request, form, formset, change):
        """The node's GPUs, each saved or removed by the fleet's actions."""
        actor = str(request.user)
        gpus = formset.save(commit=False)
        for gpu in formset.deleted_objects:
            fleet_actions.remove(gpu, actor=actor)
        for gpu in gpus:
            fleet_actions.save_gpu(gpu, actor=actor)
