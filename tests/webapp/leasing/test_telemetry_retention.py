"""Telemetry retention (webapp/leasing/retention.py): days past TELEMETRY_RETENTION_DAYS are
dropped (a partition on PostgreSQL), the readings a bill line cites are not, and the tenant
re-derives the line from them after their day is gone; the quote protocol's own rows
(attestations, nonces, audit rows) go after ATTESTATION_RETENTION_DAYS unless something
relies on them."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from attest import readings
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.webapp.helpers import drawn
from tests.webapp.leases import active, placed, settled_from_readings
from webapp.attestation.models import Attestation, Nonce, TelemetryBatch
from webapp.core.models import AuditEvent
from webapp.fleet.models import GpuHour, TelemetrySample
from webapp.fleet.partitions import MS_PER_DAY, day_start_ms, partition_name, partitioned
from webapp.fleet.telemetry import record_samples
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.retention import apply_retention
from webapp.outbox.models import OutboxEntry


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_exists(day_ms: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [partition_name(day_ms)])
        return cursor.fetchone()[0] is not None


def test_days_past_retention_are_dropped_and_bill_evidence_is_not(
    owner, fleet, attested_node, node_agent, settings
):
    settings.TELEMETRY_RETENTION_DAYS = 2
    running = actions.activate_lease(
        placed(owner.tenant, fleet.gpus[:1], [attested_node]), actor="test"
    )
    lease = settled_from_readings(running, node_agent)
    (line,) = lease.settlements.all()
    start = lease.terms["start_ms"]
    assert node_agent.attest(drawn(fleet.gpus[1:2], start + 1, start + 3, 300))["valid"]  # uncited
    record_samples(Sample(fleet.gpus[2].uuid, start, 1, 250_000, 5, 5, 40) for _ in (1,))
    link = f"/api/v1/leases/{lease.pk}/readings/?seq=0"
    before = owner.client.get(link).content.decode()
    day = day_start_ms(start)
    assert before and TelemetrySample.objects.filter(t_ms__lt=day + MS_PER_DAY).count() == 2 + 2 + 1

    done = apply_retention(now_ms=day + 3 * MS_PER_DAY)

    assert done.days_dropped >= 1 and done.days_held == 0
    assert not TelemetrySample.objects.filter(t_ms__lt=day + MS_PER_DAY).exists()
    if partitioned():
        assert not partition_exists(day)  # dropped whole, not deleted row by row
    cited = {(b["gpu"], b["digest"]) for b in line.telemetry_batches}
    left = {(b.gpu.uuid, b.digest): b for b in TelemetryBatch.objects.select_related("gpu")}
    assert set(left) == cited  # the uncited batch went with its day
    assert all(b.evidence for b in left.values())
    after = owner.client.get(link)
    assert after.status_code == 200 and after.content.decode() == before
    # the tenant re-derives the line: its rows re-hash to the digests it cites
    rows = readings.parse_rows(before)
    assert set(readings.gpu_digests(rows).items()) == cited
    assert readings.energy_mj(rows) == line.measured_energy_mj


def test_a_day_a_lease_still_to_be_settled_will_cite_is_held(owner, fleet, settings):
    settings.TELEMETRY_RETENTION_DAYS = 1
    active(owner.tenant, fleet.gpus[:1])  # running: its lines will cite today's readings
    t = now_ms()
    record_samples([Sample(fleet.gpus[0].uuid, t, 1, 250_000, 5, 5, 40)])

    done = apply_retention(now_ms=t + 5 * MS_PER_DAY)

    # (empty partitions another test left may be held too)
    assert done.days_dropped == 0 and done.days_held >= 1
    assert TelemetrySample.objects.filter(t_ms=t).exists()


def test_hourly_rollups_outlive_the_readings_and_have_a_retention_of_their_own(fleet, settings):
    settings.TELEMETRY_RETENTION_DAYS = 1
    settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 30
    t = now_ms()
    record_samples([Sample(g.uuid, t, 1, 250_000, 5, 5, 40) for g in fleet.gpus])
    assert apply_retention(now_ms=t + 5 * MS_PER_DAY).days_dropped >= 1
    assert not TelemetrySample.objects.exists()
    assert GpuHour.objects.count() == len(fleet.gpus)  # the dashboards' month still has them
    assert apply_retention(now_ms=t + 31 * MS_PER_DAY).hours_deleted == len(fleet.gpus)
    assert not GpuHour.objects.exists()


def test_the_coming_days_have_their_partitions_before_readings_arrive(db, settings):
    settings.TELEMETRY_PARTITIONS_AHEAD_DAYS = 2
    today = day_start_ms(now_ms()) + 1000 * MS_PER_DAY  # days no other test made
    made = apply_retention(now_ms=today).days_created
    if not partitioned():
        assert made == 0  # SQLite: one table, nothing to create
        return
    assert made == 3 and all(partition_exists(today + n * MS_PER_DAY) for n in range(3))
    assert apply_retention(now_ms=today).days_created == 0


def test_the_quote_protocols_outbox_rows_are_pruned_after_their_retention_and_nothing_else(
    db, settings
):
    settings.OUTBOX_PROTOCOL_RETENTION_DAYS = 7
    now = timezone.now()
    old, recent = now - timedelta(days=8), now - timedelta(days=6)

    def row(key: str, function: str, status: str, done) -> OutboxEntry:
        entry = OutboxEntry.objects.create(
            business_key=key, function=function, args={}, status=status
        )
        OutboxEntry.objects.filter(pk=entry.pk).update(done=done)
        return entry

    pruned = [
        row("c-old", "IssueChallenge", OutboxEntry.DONE, old),
        row("q-old", "RecordAttestation", OutboxEntry.DONE, old),
    ]
    kept = [
        row("q-recent", "RecordAttestation", OutboxEntry.DONE, recent),
        row("q-refused", "RecordAttestation", OutboxEntry.REJECTED, old),
        row("q-pending", "RecordAttestation", OutboxEntry.PENDING, None),
        row("lease-old", "CreateLease", OutboxEntry.DONE, old),  # a lease's story stays
        row("settle-old", "Settle", OutboxEntry.DONE, old),
    ]
    assert apply_retention(now_ms=int(now.timestamp() * 1000)).outbox_pruned == len(pruned)
    assert set(OutboxEntry.objects.values_list("pk", flat=True)) == {e.pk for e in kept}
    event = AuditEvent.objects.get(action="outbox.pruned")
    assert event.data["rows"] == len(pruned) and event.actor == "worker:telemetry_retention"
    assert apply_retention(now_ms=int(now.timestamp() * 1000)).outbox_pruned == 0


def _quote(node, days_ago: float, *, valid: bool = True, ledger_tx: str = "tx") -> Attestation:
    made = Attestation.objects.create(
        node=node, nonce=f"{days_ago}", valid=valid, quote=b"q", signature=b"s", ledger_tx=ledger_tx
    )
    Attestation.objects.filter(pk=made.pk).update(created=timezone.now() - timedelta(days=days_ago))
    return made


def _audit(action: str, days_ago: float, node) -> AuditEvent:
    event = AuditEvent.objects.create(
        actor="test", action=action, object_type="node", object_id=str(node.pk)
    )
    AuditEvent.objects.filter(pk=event.pk).update(created=timezone.now() - timedelta(days=days_ago))
    return event


def test_the_quote_protocols_own_rows_are_pruned_except_what_something_relies_on(
    owner, fleet, settings
):
    settings.ATTESTATION_RETENTION_DAYS = 30
    node = fleet.node
    pruned = [_quote(node, 40), _quote(node, 39, valid=False)]
    on_lease = _quote(node, 38)
    placed(owner.tenant, fleet.gpus[:1], [on_lease])
    placed_on = Lease.objects.get(attestations=on_lease)
    Lease.objects.filter(pk=placed_on.pk).update(state=states.SETTLED)  # no hold: settled
    with_batch = _quote(node, 37)
    TelemetryBatch.objects.create(
        attestation=with_batch, gpu=fleet.gpus[0], digest="d" * 64, first_ms=1, last_ms=2, rows=1
    )
    never_recorded = _quote(node, 36, valid=False, ledger_tx="")  # a replay: evidence
    newest_valid = _quote(node, 35)  # the clock the node's next quote is compared with
    recent = _quote(node, 10, valid=False)
    expired = time.time() - 31 * 86_400
    Nonce.objects.create(value="a" * 64, subject=node.name, expires_at=expired)
    Nonce.objects.create(value="b" * 64, subject=node.name, expires_at=time.time() - 60)
    old_rows = [_audit("node.attested", 31, node), _audit("attestation.recorded", 31, node)]
    kept_rows = [_audit("node.enrolled", 31, node), _audit("node.attested", 1, node)]

    done = apply_retention(now_ms=now_ms())

    assert done.attestations_pruned == len(pruned)
    left = set(Attestation.objects.values_list("pk", flat=True))
    assert left == {a.pk for a in (on_lease, with_batch, never_recorded, newest_valid, recent)}
    assert list(Nonce.objects.values_list("value", flat=True)) == ["b" * 64]
    audit_left = set(AuditEvent.objects.values_list("pk", flat=True))
    assert not audit_left & {e.pk for e in old_rows}
    assert {e.pk for e in kept_rows} <= audit_left
    event = AuditEvent.objects.get(action="attestation.pruned")
    assert event.data["attestations"] == 2 and event.data["nonces"] == 1
    assert event.data["audit_rows"] == len(old_rows)
    assert apply_retention(now_ms=now_ms()).attestations_pruned == 0


def test_quotes_taken_during_a_lease_still_to_be_settled_are_held(owner, fleet, settings):
    settings.ATTESTATION_RETENTION_DAYS = 30
    lease = active(owner.tenant, fleet.gpus[:1])
    Lease.objects.filter(pk=lease.pk).update(started=timezone.now() - timedelta(days=45))
    before_it, during_it = _quote(fleet.node, 50), _quote(fleet.node, 40)
    _quote(fleet.node, 1)  # the node's newest valid quote

    assert apply_retention(now_ms=now_ms()).attestations_pruned == 1

    assert not Attestation.objects.filter(pk=before_it.pk).exists()
    assert Attestation.objects.filter(pk=during_it.pk).exists()
