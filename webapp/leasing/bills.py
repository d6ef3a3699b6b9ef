"""Bills as lines: each line one settlement the ledger recorded, with its evidence. The API
and the dashboard both read money from here, so a cost shown anywhere is a sum of lines."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet, Sum
from django.urls import reverse
from django.utils import timezone

from ledger.contract import bill_line
from ledger.units import datetime_of_ms, ms_of
from webapp.attestation.models import TelemetryBatch
from webapp.attestation.telemetry import cited_readings
from webapp.leasing.models import Settlement

MONTH_RE = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
MONTHS_PER_YEAR = 12
QUERY_CHUNK = 500  # values per IN (...) query, well under SQLite's variable limit


class BillError(ValueError):
    """A bill query is malformed; the message names the parameter."""


def month_bounds_ms(month: str) -> tuple[int, int]:
    """[first ms of the month, first ms of the next) in UTC, for `YYYY-MM`."""
    match = MONTH_RE.fullmatch(month)
    if match is None:
        raise BillError(f"month: must be YYYY-MM, got {month!r}")
    year, number = int(match[1]), int(match[2])
    nxt = (year + number // MONTHS_PER_YEAR, number % MONTHS_PER_YEAR + 1)
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(nxt[0], nxt[1], 1, tzinfo=UTC)
    return ms_of(start), ms_of(end)


def month_of(ms: int) -> str:
    """The month (`YYYY-MM`, UTC) that the instant `ms` falls in."""
    return datetime_of_ms(ms).strftime("%Y-%m")


def months(lines: QuerySet) -> list[str]:
    """The months the lines' intervals ended in, latest first (each a bill: `bill(lines, m)`)."""
    ends = lines.order_by().values_list("end_ms", flat=True).distinct()
    return sorted({month_of(ms) for ms in ends}, reverse=True)


def in_month(lines: QuerySet, month: str | None) -> QuerySet:
    """The lines whose interval ended within `month` (all of them when None)."""
    if month is None:
        return lines
    start, end = month_bounds_ms(month)
    return lines.filter(end_ms__gte=start, end_ms__lt=end)


def line(s: Settlement, quotes: dict[tuple[str, str], str] | None = None) -> dict[str, Any]:
    """One bill line; `quotes` maps each (gpu, batch digest) to the ledger id of the quote
    that attested it (`attesting_quotes`)."""
    quotes = quotes or {}
    return {
        "lease": str(s.lease.ledger_id),
        "lease_pk": s.lease_id,
        "seq": s.seq,
        "generation": s.generation,
        # interval, rates, amounts, measurement and the attested batches of readings it
        # measured ([{gpu, digest, rows}]), named as ledger.contract.bill_line names them
        **bill_line.document(bill_line.from_stored(s)),
        "evidence": {
            "tx_id": s.ledger_tx or None,
            "block": s.ledger_block,
            "validation_code": s.validation_code or None,
            "receipt": reverse("lease-receipt", args=[s.lease_id]),
            "readings": reverse("lease-readings", args=[s.lease_id]) + f"?seq={s.seq}",
            # the quotes that attested the line's readings (RecordAttestation ids)
            "telemetry_quotes": sorted(
                {quotes.get((b["gpu"], b["digest"]), "") for b in s.telemetry_batches} - {""}
            ),
        },
    }


def bill(lines: QuerySet, month: str | None = None, tenant: str = "") -> dict[str, Any]:
    """The tenant's lines (in interval order) and their sum, with what `ledger audit-bill`
    needs to audit the bill as a whole (ledger.audit.bill_whole): the tenant (its ledger id,
    the slug), the period the lines end in (null ends: every line) and `as_of_ms`, taken
    before the lines are read, so a line the ledger recorded before then is on the bill."""
    as_of_ms = ms_of(timezone.now())
    start, end = month_bounds_ms(month) if month is not None else (None, None)
    chosen = in_month(lines, month).select_related("lease").order_by("end_ms", "lease", "seq")
    quotes = attesting_quotes(chosen)
    items = [line(s, quotes) for s in chosen]
    return {
        "tenant": tenant,
        "month": month,
        "period": {"start_ms": start, "end_ms": end},
        "as_of_ms": as_of_ms,
        "count": len(items),
        "total_micro": sum(i["total_micro"] for i in items),
        "lines": items,
    }


def attesting_quotes(lines: QuerySet) -> dict[tuple[str, str], str]:
    """(gpu, batch digest) -> the ledger id of the valid quote that attested it, for every
    batch the lines cite, in one query."""
    digests = sorted({b["digest"] for s in lines for b in s.telemetry_batches})
    out = {}
    for first in range(0, len(digests), QUERY_CHUNK):
        batches = TelemetryBatch.objects.filter(
            digest__in=digests[first : first + QUERY_CHUNK], attestation__valid=True
        ).values_list("gpu__uuid", "digest", "attestation__ledger_tx")
        out.update({(gpu, digest): tx for gpu, digest, tx in batches})
    return out


def readings_csv(s: Settlement) -> str:
    """The readings behind a line: the rows of the attested batches it cites, which re-hash
    to its telemetry digest (docs/billing.md, "Attested telemetry")."""
    return cited_readings(s.telemetry_batches)


def totals_by_tenant() -> dict[str, int]:
    """Every tenant's billed total: the sum of its lines."""
    rows = Settlement.objects.values("lease__tenant__name").annotate(total=Sum("total_micro"))
    return {r["lease__tenant__name"]: r["total"] or 0 for r in rows.order_by()}
