"""What the outbox relay reports about each ledger submission: the submit and commit
latency histograms, a span (a child of the request that queued the row, when it was queued
inside a trace) and a log line carrying the ledger tx id."""

from __future__ import annotations

import logging
import time

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from webapp.observability import context, tracing
from webapp.observability.metrics import LEDGER_COMMIT_SECONDS, LEDGER_SUBMIT_SECONDS
from webapp.observability.models import OutboxTrace
from webapp.outbox.models import OutboxEntry

log = logging.getLogger("wattlease.ledger")

SPAN_PREFIX = "ledger.submit "
# Outcomes that mean the ledger has the transaction; others are a refusal or a retry.
COMMITTED = "done"


class SubmitWatch:
    """Started just before a row is submitted; `submitted` once the ledger took it for
    ordering, `finished` when its outcome is known (committed, rejected or put back)."""

    def __init__(self, entry: OutboxEntry) -> None:
        self.entry = entry
        traceparent = None
        if tracing.active():  # the row's trace is looked up only when spans are recorded
            rows = OutboxTrace.objects.filter(entry_id=entry.pk)
            traceparent = rows.values_list("traceparent", flat=True).first()
        parent = tracing.context_of(traceparent)
        self.span = tracing.tracer().start_span(
            SPAN_PREFIX + entry.function,
            context=parent,  # type: ignore[arg-type]
            kind=trace.SpanKind.CLIENT,
            attributes={
                "wattlease.outbox.id": entry.pk,
                "wattlease.outbox.business_key": entry.business_key,
                "wattlease.ledger.function": entry.function,
            },
        )
        self.started = time.perf_counter()
        self.handed_over: float | None = None

    def submitted(self) -> None:
        self.handed_over = time.perf_counter()
        LEDGER_SUBMIT_SECONDS.labels(self.entry.function, "submitted").observe(
            self.handed_over - self.started
        )

    def finished(self, outcome: str, tx_id: str = "", error: str = "") -> None:
        now = time.perf_counter()
        if self.handed_over is None:  # refused or unreachable before ordering
            LEDGER_SUBMIT_SECONDS.labels(self.entry.function, outcome).observe(now - self.started)
        else:
            LEDGER_COMMIT_SECONDS.labels(self.entry.function, outcome).observe(
                now - self.handed_over
            )
        self.span.set_attribute("wattlease.ledger.outcome", outcome)
        if tx_id:
            self.span.set_attribute("wattlease.ledger.tx_id", tx_id)
        if outcome != COMMITTED:
            self.span.set_status(Status(StatusCode.ERROR, error[:200] or outcome))
        with trace.use_span(self.span, end_on_exit=True), context.bound(ledger_tx=tx_id or None):
            log.info(
                "outbox row %s %s: %s",
                self.entry.pk,
                self.entry.function,
                outcome,
                extra={"outbox_id": self.entry.pk, "function": self.entry.function},
            )
