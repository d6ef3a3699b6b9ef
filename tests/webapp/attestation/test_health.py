"""The clock a quote is compared with (health.recorded_clock): the node's newest valid
attestation with a clock since its AK was last enrolled."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webapp.attestation.health import ENROLLED_ACTION, recorded_clock
from webapp.attestation.models import Attestation
from webapp.core.models import AuditEvent


def clock(n: int) -> dict:
    return {"clock": n, "reset_count": 1, "restart_count": 0, "safe": True}


def attestation(node, minutes_ago: int, clock_value: int | None, valid: bool = True):
    made = Attestation.objects.create(
        node=node,
        nonce=f"{minutes_ago:064x}",
        valid=valid,
        quote=b"",
        signature=b"",
        clock=clock(clock_value) if clock_value is not None else {},
    )
    Attestation.objects.filter(pk=made.pk).update(
        created=timezone.now() - timedelta(minutes=minutes_ago)
    )


def enrolled(node, minutes_ago: int) -> None:
    event = AuditEvent.objects.create(
        actor="test", action=ENROLLED_ACTION, object_type="node", object_id=str(node.pk)
    )
    AuditEvent.objects.filter(pk=event.pk).update(
        created=timezone.now() - timedelta(minutes=minutes_ago)
    )


def test_the_newest_valid_clocked_attestation_is_the_baseline(fleet):
    node = fleet.node
    attestation(node, 30, 100)
    attestation(node, 20, 200)
    attestation(node, 10, 300, valid=False)  # a failed quote is no baseline
    attestation(node, 5, None)  # nor one without a clock
    assert recorded_clock(node).clock == 200


def test_without_an_enrolment_on_record_every_attestation_counts(fleet):
    attestation(fleet.node, 20, 200)
    assert recorded_clock(fleet.node).clock == 200


def test_only_attestations_since_the_last_enrolment_count(fleet):
    node = fleet.node
    enrolled(node, 60)
    attestation(node, 30, 100)
    enrolled(node, 20)  # enrolled again: a new AK, a new baseline
    assert recorded_clock(node) is None
    attestation(node, 10, 7)
    assert recorded_clock(node).clock == 7


def test_the_baseline_is_one_query(fleet):
    enrolled(fleet.node, 60)
    attestation(fleet.node, 30, 100)
    with CaptureQueriesContext(connection) as queries:
        recorded_clock(fleet.node)
    assert len(queries) == 1
