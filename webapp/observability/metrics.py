"""The process's own Prometheus instruments: what happens in requests and in the relay.
Values that live in the database (outbox depth, telemetry, cost) are read at scrape time by
`webapp.observability.collector` instead.

With PROMETHEUS_MULTIPROC_DIR set (several server or worker processes), prometheus-client
keeps these values in memory-mapped files in that folder and /metrics adds them up."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Seconds. 0.1 is the API's p99 objective (docs/operations.md), so it is a bucket edge.
REQUEST_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds. An embedded commit takes milliseconds; a Fabric one waits for a block cut (~2 s).
LEDGER_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUEST_SECONDS = Histogram(
    "wattlease_http_request_duration_seconds",
    "Time to answer an HTTP request, by method, URL route and status code",
    ["method", "route", "status"],
    buckets=REQUEST_BUCKETS_S,
)
ATTESTATION_VERDICTS = Counter(
    "wattlease_attestation_verdicts",
    "Attestation verdicts recorded, by outcome and reason code ('ok' for a valid quote)",
    ["valid", "reason"],
)
LEDGER_SUBMIT_SECONDS = Histogram(
    "wattlease_ledger_submit_duration_seconds",
    "Time to endorse and hand a transaction to ordering, by contract function and outcome",
    ["function", "outcome"],
    buckets=LEDGER_BUCKETS_S,
)
LEDGER_COMMIT_SECONDS = Histogram(
    "wattlease_ledger_commit_duration_seconds",
    "Time from submission to the commit receipt, by contract function and outcome",
    ["function", "outcome"],
    buckets=LEDGER_BUCKETS_S,
)
