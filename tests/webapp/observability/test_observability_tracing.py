"""Trace propagation through the outbox, in one process with the OpenTelemetry SDK's own
tracer and in-memory exporter (the cross-process version, through Jaeger, is
test_observability_jaeger.py): a row queued inside a span is submitted as its child."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.webapp.observability.helpers import place_one_gpu_lease
from webapp.observability.models import OutboxTrace
from webapp.observability.relay_watch import SPAN_PREFIX
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """This process's global tracer provider, exporting to memory (set once per session:
    OpenTelemetry allows one)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def submit_span(spans: InMemorySpanExporter, function: str):  # type: ignore[no-untyped-def]
    (span,) = [s for s in spans.get_finished_spans() if s.name == SPAN_PREFIX + function]
    return span


def test_a_row_queued_inside_a_span_is_submitted_as_its_child(
    spans, fleet, tenant, attested_node, ledger
):
    with trace.get_tracer("test").start_as_current_span("POST api/leases/") as request:
        place_one_gpu_lease(tenant, fleet.gpus, [attested_node])
    entry = OutboxEntry.objects.get(function="CreateLease")
    assert OutboxTrace.objects.get(entry=entry).traceparent.startswith("00-")
    assert relay_once(ledger) == {"done": 1}
    entry.refresh_from_db()
    submit = submit_span(spans, "CreateLease")
    assert submit.context.trace_id == request.get_span_context().trace_id
    assert submit.parent.span_id == request.get_span_context().span_id
    assert submit.attributes["wattlease.ledger.outcome"] == "done"
    assert submit.attributes["wattlease.ledger.tx_id"] == entry.tx_id
    assert submit.kind == trace.SpanKind.CLIENT


def test_a_row_queued_outside_any_trace_starts_its_own(spans, fleet, tenant, attested_node, ledger):
    place_one_gpu_lease(tenant, fleet.gpus, [attested_node])
    assert not OutboxTrace.objects.filter(entry__function="CreateLease").exists()
    assert relay_once(ledger) == {"done": 1}
    assert submit_span(spans, "CreateLease").parent is None


def test_a_refused_submission_is_an_error_span(spans, fleet, tenant, attested_node, ledger):
    place_one_gpu_lease(tenant, fleet.gpus, [])  # no attestation: the contract refuses it
    assert relay_once(ledger) == {"rejected": 1}
    submit = submit_span(spans, "CreateLease")
    assert submit.attributes["wattlease.ledger.outcome"] == "rejected"
    assert submit.status.status_code == trace.StatusCode.ERROR
