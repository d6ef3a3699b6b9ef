"""OpenTelemetry tracing: set up once per process when OTEL_EXPORTER_OTLP_ENDPOINT names a
collector (Jaeger's all-in-one takes OTLP/HTTP on :4318), else off and free. Django requests
are traced by OpenTelemetry's Django instrumentation; the relay's ledger submissions by
`webapp.observability.relay_watch`, as children of the request that queued them."""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

TRACER_NAME = "wattlease"
TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for spans under the collector's base URL
TRACEPARENT = "traceparent"
# Prometheus scrapes every few seconds: a trace per scrape would drown the real ones.
UNTRACED_URLS = "/metrics"
_propagator = TraceContextTextMapPropagator()
_configured = False


def configure(endpoint: str, service_name: str) -> bool:
    """Export this process's spans to `endpoint` (OTLP/HTTP base URL) and trace Django
    requests. Returns False, doing nothing, when `endpoint` is empty or it already ran."""
    global _configured
    if not endpoint or _configured:
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument(tracer_provider=provider, excluded_urls=UNTRACED_URLS)
    _configured = True
    log.info("tracing: exporting spans of %s to %s", service_name, endpoint)
    return True


def active() -> bool:
    """Whether this process records spans (an SDK tracer provider is installed)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None outside a (sampled) trace."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get(TRACEPARENT)


def context_of(traceparent: str | None) -> object | None:
    """The OpenTelemetry context a stored traceparent names (None: start a new trace)."""
    if not traceparent:
        return None
    return _propagator.extract({TRACEPARENT: traceparent})
