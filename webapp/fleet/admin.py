import json

from django.contrib import admin, messages
from django.http import HttpResponse
from django.utils.html import format_html

from chaincode_client.governance import document_digest
from chaincode_client.interface import LedgerError
from webapp.core.admin import DeletesThroughAction, Evidence
from webapp.fleet import actions, rate_card
from webapp.fleet.models import GPU, Generation, GpuHour, PcrPolicy, PoolHour, Site
from webapp.outbox.ledger import approved_policy
from webapp.outbox.records import pcr_policy_document, pcr_policy_id


@admin.register(Generation)
class GenerationAdmin(admin.ModelAdmin):
    list_display = (
        "catalogue_id",
        "family",
        "form_factor",
        "board_power_w",
        "memory_gb",
        "fp16_w_per_tflops",
        "catalogue_version",
    )
    list_filter = ("family", "architecture", "catalogue_version")
    search_fields = ("catalogue_id", "family")
    readonly_fields = [f.name for f in Generation._meta.fields]

    @admin.display(description="W per dense FP16 TFLOPS")
    def fp16_w_per_tflops(self, obj):
        value = obj.watts_per_dense_tflops("FP16")
        return "—" if value is None else f"{value:.2f}"

    def has_add_permission(self, request):
        return False  # generations come from the versioned catalogue file

    def has_delete_permission(self, request, obj=None):
        return False  # likewise: the catalogue file, synced


@admin.register(Site)
class SiteAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    """PUE and tariff are shown from the rate card in force (ledger data, changed only by a
    proposal both organisations approve), not edited here."""

    list_display = ("name", "pue", "tariff_micro_per_kwh")
    search_fields = ("name",)

    def save_model(self, request, obj, form, change):
        actions.save_site(obj, actor=str(request.user))
        if rate_card.site_rates(obj.name) is None:
            self.message_user(
                request,
                f"the rate card in force prices no site named {obj.name!r}: its nodes are not "
                "leased until a card naming it is approved",
                messages.WARNING,
            )

    @admin.display(description="PUE (rate card)")
    def pue(self, site: Site) -> str:
        rates = rate_card.site_rates(site.name)
        return "not on the rate card" if rates is None else str(rates[0])

    @admin.display(description="tariff, micro-units per kWh (rate card)")
    def tariff_micro_per_kwh(self, site: Site) -> str:
        rates = rate_card.site_rates(site.name)
        return "not on the rate card" if rates is None else str(rates[1])


@admin.register(PcrPolicy)
class PcrPolicyAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    """This server's copy of a PCR policy. The endorsers check the version both
    organisations approved on the ledger (governance kind `pcr_policy`, under `ledger_key`);
    an edit here takes effect on the ledger once one organisation's admin proposes the
    document shown on the page and the other's approves it (`wattlease policy`)."""

    list_display = ("name", "ledger_key", "on_the_ledger", "max_age_s", "effective_max_age_s")
    search_fields = ("name",)
    readonly_fields = ("ledger_key", "on_the_ledger", "ledger_document")
    actions = ["download_ledger_document"]

    def save_model(self, request, obj, form, change):
        actions.save_pcr_policy(obj, actor=str(request.user))

    @admin.display(description="ledger key")
    def ledger_key(self, policy: PcrPolicy) -> str:
        return pcr_policy_id(policy) if policy.pk else "—"

    @admin.display(description="on the ledger")
    def on_the_ledger(self, policy: PcrPolicy) -> str:
        if not policy.pk:
            return "—"
        return ledger_standing(policy)

    @admin.display(description="document to propose")
    def ledger_document(self, policy: PcrPolicy) -> str:
        if not policy.pk:
            return "—"
        command = (
            f"wattlease policy propose pcr_policy {pcr_policy_id(policy)}.json "
            f"--key {pcr_policy_id(policy)}"
        )
        return format_html(
            "<pre>{}</pre><p>SHA-256 {}. One organisation's admin proposes it (<code>{}</code>,"
            " the file from the action &ldquo;Download as a ledger policy document&rdquo;), an"
            " admin of the other organisation reviews and approves it.</p>",
            ledger_document_text(policy),
            document_digest(pcr_policy_document(policy)),
            command,
        )

    @admin.action(description="Download as a ledger policy document (one policy)")
    def download_ledger_document(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(
                request, "select exactly one policy: a proposal holds one", messages.ERROR
            )
            return None
        policy = queryset.get()
        response = HttpResponse(ledger_document_text(policy), content_type="application/json")
        name = f"{pcr_policy_id(policy)}.json"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


def ledger_document_text(policy: PcrPolicy) -> str:
    """The policy's ProposePolicy document as a file to propose: what the page shows and the
    download action gives."""
    return json.dumps(pcr_policy_document(policy), indent=2, sort_keys=True) + "\n"


def ledger_standing(policy: PcrPolicy) -> str:
    """Whether the ledger's approved PCR policy under this policy's key is this copy."""
    try:
        record = approved_policy("pcr_policy", pcr_policy_id(policy))
    except LedgerError as exc:
        return f"ledger not readable: {exc}"
    if record is None:
        return "not approved: nodes with it cannot register"
    if record["document"] == pcr_policy_document(policy):
        return f"in force (version {record['version']})"
    return (
        f"differs from version {record['version']} in force: the endorsers check that one "
        "until both organisations approve this copy"
    )


@admin.register(GPU)
class GPUAdmin(DeletesThroughAction, admin.ModelAdmin):
    remove_action = actions.remove
    list_display = ("uuid", "node", "index", "generation")
    list_filter = ("generation__family", "generation", "node__site")
    search_fields = ("uuid", "node__name")

    def save_model(self, request, obj, form, change):
        actions.save_gpu(obj, actor=str(request.user))


# TelemetrySample has no admin page: millions of rows a day, keyed by (GPU, instant), which
# the admin cannot list (no composite keys); the dashboards and the rollups below show them.
# Readings are evidence: no admin adds one, and a GPU that has any cannot be deleted
# (TelemetrySample.gpu is PROTECT), so no delete of a GPU or node takes them along.


@admin.register(GpuHour)
class GpuHourAdmin(Evidence, admin.ModelAdmin):
    """Hourly rollups, kept by the telemetry store: read only."""

    list_display = ("hour_ms", "gpu", "samples", "idle", "util_sum", "mem_sum", "power_mw_sum")
    list_filter = ("gpu__node",)
    search_fields = ("gpu__uuid",)
    readonly_fields = [f.name for f in GpuHour._meta.fields]


@admin.register(PoolHour)
class PoolHourAdmin(Evidence, admin.ModelAdmin):
    """Hourly rollups per pool (site x generation), kept by webapp.fleet.rollups: read only."""

    list_display = ("hour_ms", "site", "generation", "gpus", "samples", "util_sum", "temp_max")
    list_filter = ("site", "generation")
    readonly_fields = [f.name for f in PoolHour._meta.fields]
