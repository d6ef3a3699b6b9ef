"""The web bench's baseline (issue 23): what this stack serves without DRF's view machinery.
`GET /bench/bare-leases/` answers the document `GET /api/v1/leases/` answers (the tenant's
newest 50 leases, each with every field the list shows, its GPUs and its bill lines, and the
total count) from `values()` queries into a JsonResponse, behind the same Django middleware,
the same API-key authentication (`ApiKeyAuthentication`, called directly) and the same request
budgets (the two throttles, in Redis). The fields are the list serializer's own, so the two
cannot drift apart; tests/bench/test_bare_view.py checks that both answer the same document.
Served with DJANGO_SETTINGS_MODULE=bench.bare_settings: the production settings with this
one URL added. Never deployed."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Window
from django.http import HttpRequest, JsonResponse
from django.urls import path
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from webapp.core.api.pagination import DEFAULT_PAGE_SIZE as PAGE
from webapp.core.api.throttling import CallerRateThrottle, ClientAddressRateThrottle
from webapp.leasing.api.serializers import LeaseSerializer, SettlementSerializer
from webapp.leasing.grants import FIELDS as GRANT_FIELDS
from webapp.leasing.grants import grant_document
from webapp.leasing.models import Lease, Settlement
from webapp.tenancy.authentication import ApiKeyAuthentication
from webapp.tenancy.querysets import restrict_to_tenant
from webapp.urls import urlpatterns as app_urls

RELATIONS = ("gpus", "settlements")
COMPUTED = ("cluster",)  # the lease's grant, made of GRANT_FIELDS by grant_document
FIELDS = [f for f in LeaseSerializer.Meta.fields if f not in (*RELATIONS, *COMPUTED)]
LINE_FIELDS = SettlementSerializer.Meta.fields
TOTAL = "_total"
UNAUTHORIZED, TOO_MANY = 401, 429


def bare_leases(request: HttpRequest) -> JsonResponse:
    drf = Request(request)
    try:
        found = ApiKeyAuthentication().authenticate(drf)
    except AuthenticationFailed as exc:
        return JsonResponse({"detail": str(exc)}, status=UNAUTHORIZED)
    if found is None:
        return JsonResponse({"detail": "no credentials"}, status=UNAUTHORIZED)
    drf.user, drf.auth = found
    for throttle in (ClientAddressRateThrottle(), CallerRateThrottle()):
        if not throttle.allow_request(drf, None):
            return JsonResponse({"detail": "slow down"}, status=TOO_MANY)
    leases = restrict_to_tenant(Lease.objects.order_by("-created"), drf.user)
    rows = list(
        leases.annotate(**{TOTAL: Window(Count("*"))}).values(*FIELDS, *GRANT_FIELDS, TOTAL)[:PAGE]
    )
    ids = [row["id"] for row in rows]
    gpus, lines = defaultdict(list), defaultdict(list)
    held = Lease.gpus.through.objects.filter(lease_id__in=ids)
    for lease_id, uuid in held.order_by("gpu__node", "gpu__index").values_list(
        "lease_id", "gpu__uuid"
    ):
        gpus[lease_id].append(uuid)
    for line in Settlement.objects.filter(lease_id__in=ids).values("lease_id", *LINE_FIELDS):
        lines[line.pop("lease_id")].append(line)
    total = rows[0][TOTAL] if rows else 0
    for row in rows:
        del row[TOTAL]
        row["gpus"], row["settlements"] = gpus[row["id"]], lines[row["id"]]
        row["cluster"] = grant_document(**{name: row.pop(name) for name in GRANT_FIELDS})
    following = None  # the list's link to its next page, when the tenant has more leases
    if total > PAGE:
        following = request.build_absolute_uri(f"{request.path}?limit={PAGE}&offset={PAGE}")
    return JsonResponse({"count": total, "next": following, "previous": None, "results": rows})


urlpatterns = [*app_urls, path("bench/bare-leases/", bare_leases)]
