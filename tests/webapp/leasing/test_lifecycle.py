"""The lease lifecycle outside the demo: the lease worker's pass places, ends and settles;
the relay's reaction starts a lease when the ledger commits its contract."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from attest.readings import row_text
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.webapp import leases
from webapp.core.models import AuditEvent
from webapp.fleet.telemetry import record_samples
from webapp.leasing import states
from webapp.leasing.lifecycle import end_expired, run_pass
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import settle_closed
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

REQUEST = {"gpu_count": 2, "precision": "FP16", "hours": "0.01"}  # 36 s of lease time
LEASE_S = 36


def state_of(lease_id: int) -> str:
    return Lease.objects.get(pk=lease_id).state


def started_ago(lease_id: int, seconds: float) -> None:
    """As if the lease had started `seconds` ago (instead of waiting that long)."""
    when = timezone.now() - timedelta(seconds=seconds)
    Lease.objects.filter(pk=lease_id).update(started=when, interval_started=when)


def test_a_requested_lease_is_placed_started_on_commit_ended_and_settled(
    owner, attested_node, ledger
):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    assert run_pass(actor="worker").placed == 1
    assert state_of(lease_id) == states.PLACED  # not started before the ledger holds it
    relay_once(ledger)
    assert state_of(lease_id) == states.ACTIVE
    assert AuditEvent.objects.filter(action="lease.active", actor="ledger-relay").exists()
    started_ago(lease_id, LEASE_S + 1)
    result = run_pass(actor="worker")
    assert (result.ended, result.settled) == (1, 1)
    assert state_of(lease_id) == states.SETTLED
    relay_once(ledger)
    lease = Lease.objects.get(pk=lease_id)
    assert [s.ledger_tx != "" for s in lease.settlements.all()] == [True]
    functions = OutboxEntry.objects.filter(status=OutboxEntry.DONE).values_list("function")
    assert {"CreateLease", "EndLease", "Settle"} <= {f for (f,) in functions}


def test_a_lease_ends_only_after_its_hours(owner, attested_node, ledger):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker")
    relay_once(ledger)
    started_ago(lease_id, LEASE_S - 5)
    assert end_expired(actor="worker") == 0
    assert state_of(lease_id) == states.ACTIVE
    assert end_expired(actor="worker", hour_s=3600 / 2) == 1  # a shorter hour: it ran its time
    assert state_of(lease_id) == states.ENDING


def test_a_second_worker_finds_nothing_left_to_do(owner, attested_node, ledger):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker-1")
    relay_once(ledger)
    started_ago(lease_id, LEASE_S + 1)
    assert run_pass(actor="worker-1").settled == 1
    again = run_pass(actor="worker-2")
    assert again.as_dict() == {}
    assert settle_closed(actor="worker-2") == 0
    assert AuditEvent.objects.filter(action="lease.settled").count() == 1


def test_a_pass_with_nothing_requested_does_not_read_the_fleet(owner, attested_node, ledger):
    """Planning reads every GPU; a worker passing every few seconds over an empty queue at
    10,000 GPUs must not (bench/fleet_bench.py)."""
    with CaptureQueriesContext(connection) as idle:
        assert run_pass(actor="worker").as_dict() == {}
    assert not [q for q in idle.captured_queries if '"fleet_gpu"' in q["sql"]]
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    assert run_pass(actor="worker").placed == 1  # a request is planned at the next pass
    assert state_of(lease_id) == states.PLACED


def test_lease_worker_command_runs_one_pass(owner, attested_node, ledger):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    out = StringIO()
    call_command("lease_worker", "--once", stdout=out)
    assert "placed 1" in out.getvalue()
    assert state_of(lease_id) == states.PLACED


def test_an_ended_lease_is_settled_once_quotes_attested_its_telemetry_past_its_end(
    owner, fleet, node_agent, settings
):
    """Readings arrive with quotes: a line settled before the quote that binds the last of
    them would leave them unbilled (only attested readings are billed)."""
    settings.TELEMETRY_SETTLE_WAIT_S = 60
    gpus = fleet.gpus[:2]
    lease = leases.ended(leases.active(owner.tenant, gpus))
    end_ms = int(lease.ended.timestamp() * 1000)
    start_ms = lease.terms["start_ms"]

    def attest(rows) -> None:
        assert node_agent.attest("".join(row_text(r.canonical()) + "\n" for r in rows))["valid"]

    def reading(gpu, t_ms: int) -> Sample:
        return Sample(gpu.uuid, t_ms, 10**6 + (t_ms - start_ms) * 300, 300_000, 90, 50, 60)

    attest([reading(g, end_ms - 1) for g in gpus])
    assert settle_closed(actor="worker") == 0  # the quote holding its end is still to come
    attest([reading(gpus[0], end_ms)])
    assert settle_closed(actor="worker") == 0  # one GPU's readings are not attested past it
    record_samples([reading(gpus[1], end_ms + 1)])  # stored, but no quote bound it
    assert settle_closed(actor="worker") == 0
    attest([reading(gpus[1], end_ms + 2)])
    assert settle_closed(actor="worker") == 1
    # inside the lease: GPU 0's readings at end-1 and end (1 ms at 300 W), GPU 1's one reading
    assert Lease.objects.get(pk=lease.pk).settlements.get().measured_energy_mj == 300


def test_a_lease_whose_telemetry_stopped_is_settled_after_the_wait(owner, fleet, settings):
    settings.TELEMETRY_SETTLE_WAIT_S = 60
    lease = leases.ended(leases.active(owner.tenant, fleet.gpus[:1]))
    assert settle_closed(actor="worker") == 0
    Lease.objects.filter(pk=lease.pk).update(ended=lease.ended - timedelta(seconds=61))
    assert settle_closed(actor="worker") == 1
