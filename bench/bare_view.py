"""The web bench's baseline (issue 23): what this stack serves without DRF's view machinery.
`GET /bench/bare-leases/` answers the same 20 rows as `GET /api/v1/leases/` (the tenant's
leases, newest first, the list's fields that live on the lease row) as `values()` into a
JsonResponse, behind the same Django middleware, the same API-key authentication
(`ApiKeyAuthentication`, called directly) and the same request budgets (the two throttles,
in Redis). Served with DJANGO_SETTINGS_MODULE=bench.bare_settings: the production settings
with this one URL added. Never deployed."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from webapp.core.api.throttling import CallerRateThrottle, ClientAddressRateThrottle
from webapp.leasing.models import Lease
from webapp.tenancy.authentication import ApiKeyAuthentication
from webapp.tenancy.querysets import restrict_to_tenant
from webapp.urls import urlpatterns as app_urls

PAGE = 50  # the list's default page size
FIELDS = ("id", "ledger_id", "state", "gpu_count", "precision", "hours", "priority", "created")
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
    rows = restrict_to_tenant(Lease.objects.order_by("-created"), drf.user).values(*FIELDS)
    results = list(rows[:PAGE])
    return JsonResponse({"count": len(results), "results": results})


urlpatterns = [*app_urls, path("bench/bare-leases/", bare_leases)]
