"""`manage.py timeline --lease ID`: one lease's audit, attestation, ledger and cost rows on
one axis, with costs out of step with their audit event flagged."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from webapp.leasing.lifecycle import run_pass
from webapp.leasing.models import Settlement
from webapp.outbox.relay import relay_once

REQUEST = {"gpu_count": 2, "precision": "FP16", "hours": "1"}


@pytest.fixture
def settled_id(owner, attested_node, ledger) -> int:
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker")
    relay_once(ledger)
    owner.client.post(f"/api/v1/leases/{lease_id}/end/")
    run_pass(actor="worker")
    relay_once(ledger)
    return lease_id


def test_the_timeline_interleaves_every_source_in_time_order(settled_id):
    out = StringIO()
    call_command("timeline", "--lease", str(settled_id), stdout=out)
    lines = out.getvalue().splitlines()
    stamps = [line.split()[0] for line in lines]
    assert stamps == sorted(stamps)
    sources = {line.split()[1] for line in lines}
    assert sources == {"audit", "attestation", "ledger", "cost"}
    text = out.getvalue()
    for expected in ("lease.requested", "lease.active", "CreateLease block", "Settle block"):
        assert expected in text
    assert "FLAG" not in text
    line = Settlement.objects.get(lease_id=settled_id)
    assert f"settlement #0: total {line.total_micro} micro-units" in text


def test_a_cost_change_far_from_its_audit_event_is_flagged(settled_id):
    settlement = Settlement.objects.get(lease_id=settled_id)
    Settlement.objects.filter(pk=settlement.pk).update(
        created=settlement.created + timedelta(seconds=30)
    )
    out = StringIO()
    with pytest.raises(CommandError, match="out of step"):
        call_command("timeline", "--lease", str(settled_id), "--tolerance", "5", stdout=out)
    assert "FLAG settlement #0 and lease.settled are 30." in out.getvalue()


def test_an_unknown_lease_is_one_clear_error(db):
    with pytest.raises(CommandError, match="--lease 999: no such lease"):
        call_command("timeline", "--lease", "999")
