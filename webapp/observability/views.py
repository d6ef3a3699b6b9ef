"""GET /metrics: the Prometheus exposition of this deployment.

Not for the internet: a caller is served only from an address in METRICS_ALLOWED_NETWORKS
(loopback by default) or with `Authorization: Bearer <METRICS_TOKEN>`; everyone else gets
a 404, so the endpoint's existence is not advertised. Behind a reverse proxy on the same
host every caller looks like loopback: there, empty METRICS_ALLOWED_NETWORKS and use the
token (docs/operations.md)."""

from __future__ import annotations

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from webapp.observability.collector import DatabaseCollector


def _allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.METRICS_ALLOWED_NETWORKS)


def _process_registry() -> CollectorRegistry:
    """This process's instruments, or every process's when they share a multiprocess dir."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        raise Http404
    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    body = generate_latest(_process_registry()) + generate_latest(database)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
