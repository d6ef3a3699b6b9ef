"""The tenant console: what the tenant API offers, as pages. Views stay thin: queries go
through the leasing selectors (restricted by restrict_to_tenant, as the API's are), writes
through the leasing actions, prices through the scheduler
(webapp.leasing.scheduling.preview)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _

from scheduler.telemetry.sample import CSV_FIELDS
from webapp.attestation import selectors as attestations
from webapp.console.access import owner_action, tenant_page
from webapp.console.progress import progress_pct
from webapp.core.templatetags.units import word
from webapp.fleet.models import GPU, Generation
from webapp.fleet.telemetry import samples_between
from webapp.leasing import actions, bill_audit, grants, quote, scheduling, states, story
from webapp.leasing import bills as bill_lines
from webapp.leasing import selectors as lease_reads
from webapp.leasing.api.serializers import LeaseRequestSerializer
from webapp.leasing.models import Lease
from webapp.leasing.receipts import ReceiptUnavailable, lease_receipt
from webapp.tenancy.querysets import restrict_to_tenant

MS = 1000


def _leases(request: HttpRequest):
    return lease_reads.tenant_leases(request.membership)  # type: ignore[attr-defined]


def _lease(request: HttpRequest, pk: int) -> Lease:
    return get_object_or_404(_leases(request).prefetch_related("gpus", "settlements"), pk=pk)


def _actor(request: HttpRequest) -> str:
    return f"{request.user} (console)"


def _with_progress(leases) -> list[dict]:
    now = timezone.now()
    return [
        {"lease": lease, "progress": progress_pct(lease, now, settings.LEASE_HOUR_S)}
        for lease in leases
    ]


@tenant_page
def leases(request: HttpRequest) -> HttpResponse:
    rows = _with_progress(_leases(request).prefetch_related("gpus")[:200])
    return render(request, "console/leases.html", {"rows": rows})


@tenant_page
def leases_live(request: HttpRequest) -> JsonResponse:
    """State and progress of the tenant's leases, polled by console.js."""
    rows = _with_progress(_leases(request)[:200])
    return JsonResponse(
        {
            "leases": [
                {
                    "id": r["lease"].pk,
                    "state": r["lease"].state,
                    "word": word(r["lease"].state),  # as the page says it, in its language
                    "progress": r["progress"],
                }
                for r in rows
            ]
        }
    )


@tenant_page
def lease_detail(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease(request, pk)
    steps = story.story(lease)
    context = {
        "lease": lease,
        "progress": progress_pct(lease, timezone.now(), settings.LEASE_HOUR_S),
        # the quote explained from the terms the ledger records (from the last move on)
        "quote": quote.explain(lease.terms) if lease.terms else None,
        "moved": any(step.step == "migrated" for step in steps),
        "story": steps,
        "ledger_steps": story.STEP_WRITES,
        "nodes": story.node_quotes(lease),
        "generations": Generation.objects.order_by("catalogue_id"),
        "can_end": lease.state in states.ENDABLE,
        "can_cancel": lease.state in states.CANCELLABLE,
        "bill": bill_lines.bill(lease.settlements.all(), tenant=lease.tenant.slug),
        "cluster": grants.grant_view(lease),
        "jobs": None,
        "jobs_error": "",
    }
    if lease.grants:
        try:
            context["jobs"] = grants.lease_jobs(lease)
        except grants.ClusterError as exc:
            context["jobs_error"] = _(
                "The cluster could not be asked for the lease's jobs: %(why)s"
            ) % {"why": exc}
    bill_audit.add_verdicts(context["bill"]["lines"])
    return render(request, "console/lease.html", context)


@tenant_page
def lease_request(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST with `preview`: the scheduler's price for it now, nothing
    written. POST with `request` (owners only): the lease is requested."""
    form = LeaseRequestSerializer(data=request.POST) if request.method == "POST" else None
    context: dict = {"values": request.POST, "precisions": ["FP32", "TF32", "BF16", "FP16", "FP8"]}
    if form is not None and form.is_valid():
        if "request" in request.POST:
            if not request.membership.can_write:  # type: ignore[attr-defined]
                return render(
                    request,
                    "console/forbidden.html",
                    {"why": _("Members read; only the tenant's owner may request leases.")},
                    status=403,
                )
            try:
                lease = actions.request_lease(
                    request.membership.tenant,  # type: ignore[attr-defined]
                    actor=_actor(request),
                    member=request.membership,  # type: ignore[attr-defined]
                    **form.validated_data,
                )
            except actions.LeaseError as refused:  # above the tenant's entitlement or quota
                context["errors"] = {refused.code: [str(refused)]}
                return render(request, "console/request.html", context)
            messages.success(request, _("Lease %(pk)s requested.") % {"pk": lease.pk})
            return redirect("console-lease", pk=lease.pk)
        context["preview"] = scheduling.preview(**form.validated_data)
    elif form is not None:
        context["errors"] = form.errors
    return render(request, "console/request.html", context)


@owner_action
def lease_end(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease(request, pk)
    _do(
        request,
        lambda: actions.end_lease(lease, actor=_actor(request)),
        _("Lease %(pk)s ended.") % {"pk": pk},
    )
    return redirect("console-lease", pk=pk)


@owner_action
def lease_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease(request, pk)
    _do(
        request,
        lambda: actions.cancel_lease(lease, reason="by tenant", actor=_actor(request)),
        _("Lease %(pk)s cancelled.") % {"pk": pk},
    )
    return redirect("console-lease", pk=pk)


@owner_action
def lease_migrate(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease(request, pk)
    generation = request.POST.get("generation", "")
    if not Generation.objects.filter(catalogue_id=generation).exists():
        messages.error(request, f"generation: {generation!r} is not in the catalogue.")
    else:
        _do(
            request,
            lambda: scheduling.migrate(lease, generation, actor=_actor(request)),
            _("Lease %(pk)s moved to %(generation)s.") % {"pk": pk, "generation": generation},
        )
    return redirect("console-lease", pk=pk)


def _do(request: HttpRequest, action, done: str) -> None:
    try:
        action()
    except (states.IllegalTransition, actions.LeaseError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)


@tenant_page
def lease_receipt_download(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease(request, pk)
    try:
        receipt = lease_receipt(lease)
    except ReceiptUnavailable as exc:
        return HttpResponse(exc.detail, status=exc.status, content_type="text/plain")
    response = HttpResponse(
        json.dumps(receipt, indent=1, sort_keys=True), content_type="application/json"
    )
    response["Content-Disposition"] = f'attachment; filename="lease-{pk}-receipt.json"'
    return response


@tenant_page
def lease_readings(request: HttpRequest, pk: int) -> HttpResponse:
    """The telemetry of the lease's GPUs while it ran, as CSV (the trace format)."""
    lease = _lease(request, pk)
    if lease.started is None:
        return HttpResponse(f"lease {pk} has not started", status=409, content_type="text/plain")
    until = lease.ended or timezone.now()
    samples = samples_between(
        list(lease.gpus.all()), int(lease.started.timestamp() * MS), int(until.timestamp() * MS)
    )
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    writer.writerows(sample.canonical() for sample in samples)
    response = HttpResponse(out.getvalue(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="lease-{pk}-readings.csv"'
    return response


@tenant_page
def bills(request: HttpRequest) -> HttpResponse:
    """Bills by month: the tenant's bill lines (webapp.leasing.bills, as the API serves them),
    each a settlement the ledger recorded, with its evidence and the verdict of re-deriving
    it from the lease's receipt and the line's readings (webapp.leasing.bill_audit)."""
    lines = lease_reads.tenant_lines(request.membership)  # type: ignore[attr-defined]
    tenant = request.membership.tenant.slug  # type: ignore[attr-defined]
    by_month = [
        {**bill_lines.bill(lines, month, tenant), "month_start": _month_start(month)}
        for month in bill_lines.months(lines)
    ]
    bill_audit.add_verdicts([line for bill in by_month for line in bill["lines"]])
    context = {"bills": by_month, "audit_command": bill_audit.AUDIT_COMMAND}
    return render(request, "console/bills.html", context)


@tenant_page
def bill_download(request: HttpRequest, month: str) -> HttpResponse:
    """One month's bill as `GET /api/v1/bills/?month=` serves it: BILL.json of the audit."""
    lines = lease_reads.tenant_lines(request.membership)  # type: ignore[attr-defined]
    try:
        tenant = request.membership.tenant.slug  # type: ignore[attr-defined]
        bill = bill_lines.bill(lines, month, tenant)
    except bill_lines.BillError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    response = JsonResponse(bill)
    response["Content-Disposition"] = f'attachment; filename="bill-{month}.json"'
    return response


@tenant_page
def line_readings(request: HttpRequest, pk: int, seq: int) -> HttpResponse:
    """The readings behind one bill line (the rows its telemetry digest covers), as
    `GET /api/v1/leases/<id>/readings/?seq=` serves them: READINGS/<lease>/<seq>.csv."""
    line = get_object_or_404(_lease(request, pk).settlements, seq=seq)
    response = HttpResponse(bill_lines.readings_csv(line), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{seq}.csv"'
    return response


def _month_start(month: str) -> datetime:
    start_ms, _ = bill_lines.month_bounds_ms(month)
    return datetime.fromtimestamp(start_ms / MS, tz=UTC)


@tenant_page
def gpus(request: HttpRequest) -> HttpResponse:
    """The attestation status of the GPUs the tenant holds now."""
    held = (
        restrict_to_tenant(GPU.objects.all(), request.membership)  # type: ignore[attr-defined]
        .filter(leases__state__in=states.HOLDS_GPUS)
        .select_related("node", "generation")
        .distinct()
        .order_by("node__name", "index")
    )
    rows = [{"gpu": gpu, "attestation": attestations.latest(gpu.node)} for gpu in held]
    return render(request, "console/gpus.html", {"rows": rows})
