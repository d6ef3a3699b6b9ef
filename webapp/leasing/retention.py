"""Telemetry retention (docs/operations.md, "Telemetry retention"): what keeps the readings
from growing without bound, and what it never drops.

- Readings (fleet.TelemetrySample) are kept TELEMETRY_RETENTION_DAYS whole UTC days; an
  older day is dropped whole (PostgreSQL: its partition; SQLite: its rows).
- A day is not dropped while a lease that started before its end is still to be settled:
  its lines will cite those readings (the hold).
- The readings a bill line cites outlive their day: before the day is dropped, the rows of
  every batch a line cites (and of every batch that reaches past the days being dropped, which
  a later line may cite) are copied to the batch's `evidence`, kept as long as the line is.
  Batches no line cites are deleted with their day: nothing can cite them any more.
- Hourly rollups (fleet.GpuHour and fleet.PoolHour, what the dashboards' longer views read)
  are kept TELEMETRY_ROLLUP_RETENTION_DAYS.
- The quote protocol's outbox rows (IssueChallenge, RecordAttestation) are kept
  OUTBOX_PROTOCOL_RETENTION_DAYS after they were committed (webapp.outbox.actions.prune_done).
- Its attestations, nonces and per-quote audit rows are kept ATTESTATION_RETENTION_DAYS,
  except what a lease, a bill line or a node's next quote relies on, and the quotes taken
  since the oldest lease still to be settled started
  (webapp.attestation.actions.prune_protocol).
- Partitions are created TELEMETRY_PARTITIONS_AHEAD_DAYS ahead (the store also creates a
  missing one before inserting, so a late run never refuses a reading).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Min

from ledger.contract import bill_line
from ledger.units import MS_PER_DAY, datetime_of_ms, ms_of
from webapp.attestation import actions as attestation_actions
from webapp.attestation.models import TelemetryBatch
from webapp.attestation.telemetry import stored_rows
from webapp.fleet.models import GpuHour, PoolHour
from webapp.fleet.partitions import day_start_ms, drop_day, ensure_days, stored_days
from webapp.leasing import states
from webapp.leasing.models import Lease, Settlement
from webapp.outbox import actions as outbox_actions

CHUNK = 2_000  # batches read back and written per query
RETENTION_ACTOR = "worker:telemetry_retention"


@dataclass(frozen=True)
class Retained:
    days_created: int
    days_dropped: int
    days_held: int  # past retention, kept for a lease still to be settled
    evidence_kept: int  # batches whose rows were copied to their evidence
    batches_deleted: int
    hours_deleted: int
    outbox_pruned: int
    attestations_pruned: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def unsettled_since_ms() -> int | None:
    """When the oldest lease still to be settled started (its lines will cite readings from
    then on), or None."""
    started = (
        Lease.objects.filter(started__isnull=False)
        .exclude(state__in=states.TERMINAL)
        .aggregate(t=Min("started"))["t"]
    )
    return None if started is None else ms_of(started)


def apply_retention(now_ms: int | None = None) -> Retained:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    today = day_start_ms(now_ms)
    ahead = settings.TELEMETRY_PARTITIONS_AHEAD_DAYS
    created = ensure_days(today + n * MS_PER_DAY for n in range(ahead + 1))
    cutoff = today - settings.TELEMETRY_RETENTION_DAYS * MS_PER_DAY
    hold = unsettled_since_ms()
    limit = cutoff if hold is None else min(cutoff, day_start_ms(hold))
    old = [day for day in stored_days() if day + MS_PER_DAY <= cutoff]
    dropping = [day for day in old if day + MS_PER_DAY <= limit]
    kept = deleted = 0
    if dropping:
        kept, deleted = keep_cited(dropping[0], limit)
        for day in dropping:
            with transaction.atomic():
                drop_day(day)
    rollup_cutoff = today - settings.TELEMETRY_ROLLUP_RETENTION_DAYS * MS_PER_DAY
    hours, _ = GpuHour.objects.filter(hour_ms__lt=rollup_cutoff).delete()
    PoolHour.objects.filter(hour_ms__lt=rollup_cutoff).delete()
    protocol_cutoff = now_ms - settings.OUTBOX_PROTOCOL_RETENTION_DAYS * MS_PER_DAY
    pruned = outbox_actions.prune_done(datetime_of_ms(protocol_cutoff), actor=RETENTION_ACTOR)
    quotes = attestation_actions.prune_protocol(
        datetime_of_ms(now_ms - settings.ATTESTATION_RETENTION_DAYS * MS_PER_DAY),
        hold=None if hold is None else datetime_of_ms(hold),
        actor=RETENTION_ACTOR,
    )
    return Retained(
        len(created),
        len(dropping),
        len(old) - len(dropping),
        kept,
        deleted,
        hours,
        pruned,
        quotes.attestations,
    )


def keep_cited(oldest_ms: int, limit_ms: int) -> tuple[int, int]:
    """Before the readings older than `limit_ms` go: copy to its evidence the rows of every
    batch starting before it that a bill line cites or that reaches past it; delete the
    others. Returns (batches kept, batches deleted)."""
    kept = deleted = 0
    cited = _cited(oldest_ms, limit_ms)
    pending = TelemetryBatch.objects.filter(first_ms__lt=limit_ms, evidence="").order_by("pk")
    after = 0
    while chunk := list(pending.filter(pk__gt=after).select_related("gpu", "attestation")[:CHUNK]):
        after = chunk[-1].pk
        keep = [
            b
            for b in chunk
            if b.attestation.valid and ((b.gpu.uuid, b.digest) in cited or b.last_ms >= limit_ms)
        ]
        rows = stored_rows(keep)
        for b in keep:
            b.evidence = "".join(row + "\n" for row in rows[b.pk_key()])
        with transaction.atomic():
            kept += TelemetryBatch.objects.bulk_update(
                [b for b in keep if b.evidence], ["evidence"]
            )
            # a cited batch whose rows are already gone is left as it is, never deleted
            drop = {b.pk for b in chunk} - {b.pk for b in keep}
            deleted += TelemetryBatch.objects.filter(pk__in=drop).delete()[0]
    return kept, deleted


def _cited(oldest_ms: int, limit_ms: int) -> set[tuple[str, str]]:
    """(gpu, digest) of every batch cited by a bill line over readings before `limit_ms`."""
    lines = Settlement.objects.filter(start_ms__lt=limit_ms, end_ms__gte=oldest_ms)
    return {
        (b["gpu"], b["digest"])
        for batches in lines.values_list(bill_line.stored(bill_line.BATCHES), flat=True)
        for b in batches
    }
