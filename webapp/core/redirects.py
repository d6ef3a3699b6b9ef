"""Old unversioned API paths answer with a permanent redirect to /api/v1/.

308 (not 301) so a client that follows it repeats the same method and body: a `curl -L`
POST to /api/leases/ still requests a lease."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponsePermanentRedirect

API_V1 = "/api/v1/"


class HttpResponsePermanentRedirectKeepMethod(HttpResponsePermanentRedirect):
    status_code = 308


def to_api_v1(request: HttpRequest, rest: str) -> HttpResponsePermanentRedirectKeepMethod:
    query = request.META.get("QUERY_STRING", "")
    return HttpResponsePermanentRedirectKeepMethod(API_V1 + rest + (f"?{query}" if query else ""))
