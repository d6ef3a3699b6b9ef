"""One middleware around every HTTP request: a request id (the caller's X-Request-ID when it
is well-formed, else a new one) bound to the log context and echoed in the response, the
latency histogram, and one access-log line."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from webapp.observability import context
from webapp.observability.metrics import REQUEST_SECONDS

log = logging.getLogger("wattlease.request")

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{8,64}")
# Methods outside this set are counted as "other": a label value a caller cannot multiply.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED_ROUTE = "unmatched"  # 404s without a URL pattern: one series, not one per path
MS_PER_S = 1000


def _request_id(request: HttpRequest) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if REQUEST_ID_PATTERN.fullmatch(given) else uuid.uuid4().hex


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else UNMATCHED_ROUTE


def _tenant(request: HttpRequest) -> str | None:
    tenant = getattr(getattr(request, "user", None), "tenant", None)
    return getattr(tenant, "slug", None)


class ObservabilityMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = _request_id(request)
        started = time.perf_counter()
        with context.bound(request_id=request_id, tenant=None, lease=None, ledger_tx=None):
            response = self.get_response(request)
            seconds = time.perf_counter() - started
            method = request.method if request.method in KNOWN_METHODS else "other"
            route = _route(request)
            REQUEST_SECONDS.labels(method, route, str(response.status_code)).observe(seconds)
            response[REQUEST_ID_HEADER] = request_id
            context.set_field("tenant", context.current()["tenant"] or _tenant(request))
            log.info(
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": method,
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(seconds * MS_PER_S, 2),
                },
            )
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):  # type: ignore[no-untyped-def]
        """A URL that names a lease puts it in the log context for the rest of the request."""
        route = _route(request)
        if route.startswith("api/v1/leases/") and "pk" in view_kwargs:
            context.set_field("lease", str(view_kwargs["pk"])[:40])
        return None
