"""Log lines as JSON: each carries the request id, tenant, lease, ledger tx id and trace id
of what it is about, and parses back as one JSON object."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from decimal import Decimal

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.webapp.observability.helpers import ACTOR, place_one_gpu_lease
from webapp.leasing import actions
from webapp.observability.jsonlog import JsonFormatter
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """What the web app's loggers write, formatted by the production formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(n) for n in ("wattlease.request", "wattlease.ledger", "probe")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield out
    for logger in loggers:
        logger.removeHandler(handler)


def parsed(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_request_line_names_its_request_id_tenant_and_lease(owner, fleet, json_lines):
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    response = owner.client.get(f"/api/v1/leases/{lease.pk}/", HTTP_X_REQUEST_ID="req-0123456789")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "req-0123456789"
    (line,) = [r for r in parsed(json_lines) if r["logger"] == "wattlease.request"]
    assert line["request_id"] == "req-0123456789"
    assert line["tenant"] == owner.tenant.slug
    assert line["lease"] == str(lease.pk)
    assert line["status"] == 200 and line["route"].startswith("api/v1/leases/(?P<pk>")
    assert line["level"] == "INFO" and line["ts"].endswith("+00:00")


def test_a_malformed_request_id_is_replaced_not_echoed(client, db, json_lines):
    response = client.get("/dashboard/data.json", HTTP_X_REQUEST_ID='x"\n{injected}')
    generated = response["X-Request-ID"]
    assert len(generated) == 32 and "injected" not in generated
    (line,) = parsed(json_lines)
    assert line["request_id"] == generated and line["tenant"] is None


def test_a_line_inside_a_span_carries_its_trace_and_span_ids(json_lines):
    tracer = TracerProvider().get_tracer("test")  # the SDK's real tracer, not exported
    with tracer.start_as_current_span("work") as span:
        logging.getLogger("probe").info("inside", extra={"answer": 42})
    (line,) = parsed(json_lines)
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert line["answer"] == 42 and line["message"] == "inside"


def test_the_relay_line_of_a_commit_carries_its_ledger_tx_id(
    fleet, tenant, attested_node, ledger, json_lines
):
    place_one_gpu_lease(tenant, fleet.gpus, [attested_node])
    json_lines.truncate(0)
    json_lines.seek(0)
    assert relay_once(ledger) == {"done": 1}
    entry = OutboxEntry.objects.get(function="CreateLease")
    (line,) = [r for r in parsed(json_lines) if r["logger"] == "wattlease.ledger"]
    assert line["ledger_tx"] == entry.tx_id and entry.tx_id
    assert line["function"] == "CreateLease" and line["outbox_id"] == entry.pk


def test_an_exception_is_one_line_with_its_traceback(json_lines):
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("probe").exception("failed")
    (line,) = parsed(json_lines)
    assert "ValueError: boom" in line["exception"] and line["level"] == "ERROR"
