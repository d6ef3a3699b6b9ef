"""Schemathesis against the tenant API's own OpenAPI schema (/api/v1/schema/): every
operation, called in-process as an authenticated tenant with a write key (the node agents'
operations with a node's credential), with bodies,
queries and paths generated from the schema (valid and invalid ones). No answer may be a
5xx; every status code, content type and body must be what the schema documents for that
operation (errors included: the API's one error format).

Bounded: MAX_EXAMPLES generated cases per operation (a few minutes for the whole API)."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.webapp import leases
from webapp.attestation import actions as attestation_actions

MAX_EXAMPLES = 100
SCHEMA_PATH = "/api/v1/schema/"
AGENT_PATHS = "/api/v1/agent/"
# generous budgets: the fuzz must see the API's answers, not its throttle's
RATES = {"key": "100000/s", "node": "100000/s", "ip": "100000/s", "auth_failure": "100000/s"}


@pytest.fixture
def api_schema(db, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": RATES}
    # as Django's test client does: a request's start and end must not close the test's
    # database connection (its transaction holds the fixtures)
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi(SCHEMA_PATH, get_wsgi_application())
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def node_token(fleet) -> str:
    return attestation_actions.issue_node_credential(fleet.node, actor="test")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_operation_answers_a_server_error(case, owner, fleet, node_token):
    if not hasattr(owner, "lease"):  # objects the generated ids may name
        owner.lease = leases.active(owner.tenant, fleet.gpus[:1])
    # the node agents' operations take the node's credential, the rest the tenant's key
    token = node_token if case.path.startswith(AGENT_PATHS) else owner.token
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )


def test_operations_with_query_parameters_document_their_400(owner):
    """Found by the run above: `?month=` and `?seq=` answer 400 for a value they cannot
    read, which their operations did not document."""
    paths = owner.client.get(f"{SCHEMA_PATH}?format=json").json()["paths"]
    for path in ("/api/v1/bills/", "/api/v1/leases/{id}/readings/"):
        assert "400" in paths[path]["get"]["responses"], path
    seq = paths["/api/v1/leases/{id}/readings/"]["get"]["parameters"]
    assert any(p["name"] == "seq" and p["required"] for p in seq)


def test_a_receipt_not_yet_on_the_ledger_answers_in_the_one_error_format(owner, fleet):
    """Found by the run above (response schema check): the 409 had only `detail`."""
    lease = leases.placed(owner.tenant, fleet.gpus[:1])
    response = owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/")
    assert response.status_code == 409
    assert response.json()["code"] == "receipt.unavailable" and response.json()["detail"]
