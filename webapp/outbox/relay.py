"""The outbox relay: claims pending rows, submits them to the ledger, records receipts.

Claiming is a conditional UPDATE (pending → sending, "another process got there first" is
simply a row this worker does not get). Rows are sent in creation order; a row whose
prerequisites are not on the ledger yet waits. Outcomes:
- committed VALID → done, receipt stored, the domain row gets its ledger tx id;
- the contract refused (EndorsementError) → rejected, reason stored, the domain is told;
- invalid at commit (MVCC) or the ledger unreachable → back to pending with a back-off.
Every contract function is idempotent by business key, so a retry never double-books.

Rows are pipelined: each is submitted without waiting for the one before to commit
(submit_async), so a batch shares blocks instead of paying a block's cut time each (on
Fabric, the orderer's batch timeout: seconds). Order still holds where it matters: a row is
not sent while an earlier row about the same ledger record (node, lease, GPU; see
`subjects`) is in flight — the relay first collects those receipts — nor while an earlier
one about it is waiting or backing off, so a lease is never ended on the ledger before it
was created there.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chaincode_client.interface import (
    EndorsementError,
    LedgerClient,
    LedgerError,
    LedgerUnavailable,
    PeersBehind,
    PendingCommit,
    Receipt,
)
from webapp.core.events import publish_on_commit
from webapp.outbox import hooks
from webapp.outbox.models import OutboxEntry
from webapp.outbox.signals import Watchers

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300
# Another organisation's peer refused what this organisation's peer endorsed (PeersBehind):
# it has not yet received the block of an earlier row, usually milliseconds behind, up to the
# delivery client's keepalive and reconnect (chaincode_client/fabric_network/configs.py,
# ~15-25 s) when the orderer it pulled blocks from went away. Ask again every
# PEERS_BEHIND_RETRY_S for the first PEERS_BEHIND_PATIENCE attempts instead of doubling the
# wait: a doubling back-off turned 20 s of lag into a minute of waiting. A disagreement that
# lasts longer is no lag and backs off like any other fault.
PEERS_BEHIND_RETRY_S = 2
PEERS_BEHIND_PATIENCE = 30  # attempts: a minute
ANY_GPU = "gpu:*"  # a function that frees GPUs (EndLease, MigrateLease) meets every GPU
FREES_GPUS = ("EndLease", "MigrateLease")
Waiting = tuple[tuple[datetime, int], set[str]]  # a row backing off: (created, id), subjects


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim(batch: int, now=None) -> list[OutboxEntry]:
    """Up to `batch` ready rows, oldest first, marked as this worker's (one UPDATE: a row
    another worker claimed first is simply not among them)."""
    now = now or timezone.now()
    OutboxEntry.objects.filter(
        status=OutboxEntry.SENDING,
        next_attempt__lt=now - timedelta(seconds=settings.OUTBOX_STALE_CLAIM_S),
    ).update(status=OutboxEntry.PENDING)
    ready = OutboxEntry.objects.filter(status=OutboxEntry.PENDING).exclude(next_attempt__gt=now)
    ids = list(ready.order_by("created", "id").values_list("id", flat=True)[:batch])
    if not ids:
        return []
    token = f"{worker_id()}#{secrets.token_hex(4)}"[-100:]  # this claim's rows, and no others
    OutboxEntry.objects.filter(id__in=ids, status=OutboxEntry.PENDING).update(
        status=OutboxEntry.SENDING, claimed_by=token, next_attempt=now
    )
    return list(
        OutboxEntry.objects.filter(
            id__in=ids, claimed_by=token, status=OutboxEntry.SENDING
        ).order_by("created", "id")
    )


def backoff_s(attempts: int, peers_behind: bool = False) -> int:
    """Seconds before a row's next attempt, after `attempts` attempts."""
    if peers_behind and attempts <= PEERS_BEHIND_PATIENCE:
        return PEERS_BEHIND_RETRY_S
    return min(MAX_BACKOFF_S, 2 ** min(attempts, 9))


def _retry(
    entry: OutboxEntry, error: str, level: int = logging.WARNING, peers_behind: bool = False
) -> None:
    entry.attempts += 1
    backoff = backoff_s(entry.attempts, peers_behind)
    log.log(
        level,
        "outbox row %s (%s) attempt %d: retry in %ds: %s",
        entry.id,
        entry.function,
        entry.attempts,
        backoff,
        error[:300],
    )
    entry.status = OutboxEntry.PENDING
    entry.next_attempt = timezone.now() + timedelta(seconds=backoff)
    entry.last_error = error[:2000]
    entry.save()


def _done(entry: OutboxEntry, receipt: Receipt) -> None:
    with transaction.atomic():
        entry.attempts += 1
        entry.status = OutboxEntry.DONE
        entry.tx_id = receipt.tx_id
        entry.block_number = receipt.block_number
        entry.validation_code = receipt.validation_code
        entry.last_error = ""
        entry.done = timezone.now()
        entry.save()
        hooks.committed(entry, receipt)
        publish_on_commit("ledger", block=receipt.block_number, function=entry.function)


def _rejected(entry: OutboxEntry, message: str) -> None:
    with transaction.atomic():
        entry.attempts += 1
        entry.status = OutboxEntry.REJECTED
        entry.last_error = message[:2000]
        entry.done = timezone.now()
        entry.save()
        hooks.rejected(entry, message)
        publish_on_commit("ledger", function=entry.function, rejected=True)


def subjects(function: str, args: dict[str, Any]) -> set[str]:
    """The ledger records a row reads or changes, as far as order between rows matters:
    its node, its lease and the GPUs it registers or claims."""
    out = set()
    if "node_id" in args:
        out.add(f"node:{args['node_id']}")
    if "lease_id" in args:
        out.add(f"lease:{args['lease_id']}")
    for gpu in args.get("gpus", ()):
        out.add(f"gpu:{gpu['uuid'] if isinstance(gpu, dict) else gpu}")
    if function in FREES_GPUS:
        out.add(ANY_GPU)
    return out


def overlap(a: set[str], b: set[str]) -> bool:
    if a & b:
        return True
    a_gpu = any(s.startswith("gpu:") for s in a)
    b_gpu = any(s.startswith("gpu:") for s in b)
    return (ANY_GPU in a and b_gpu) or (ANY_GPU in b and a_gpu)


def _await(pending: PendingCommit) -> Receipt | LedgerError:
    try:
        return pending.receipt()
    except LedgerError as exc:
        return exc


class _Pipeline:
    """Rows submitted and not yet committed, the ledger records they touch, and the rows
    that are waiting (backing off from earlier passes, or put back in this one)."""

    def __init__(
        self, client: LedgerClient, counts: dict[str, int], waiting: list[Waiting]
    ) -> None:
        self.client = client
        self.counts = counts
        self.in_flight: list[tuple[OutboxEntry, PendingCommit, Watchers]] = []
        self.touched: set[str] = set()
        self.waiting = waiting

    def count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def put_back(
        self, entry: OutboxEntry, why: str, outcome: str, peers_behind: bool = False
    ) -> None:
        # a fault (ledger unreachable, invalid at commit) is a warning; waiting for an
        # earlier row is the ordering working as designed
        level = logging.WARNING if outcome == "retry" else logging.INFO
        _retry(entry, why, level, peers_behind)
        self.waiting.append(((entry.created, entry.id), subjects(entry.function, entry.args)))
        self.count(outcome)

    def behind_a_waiting_row(self, entry: OutboxEntry, mine: set[str]) -> bool:
        earlier = (entry.created, entry.id)
        return any(key < earlier and overlap(mine, theirs) for key, theirs in self.waiting)

    def drain(self) -> None:
        """Collect the receipts (no database transaction is open while the ledger is waited
        for), then record every outcome in one database transaction."""
        results = [(entry, _await(pending), watch) for entry, pending, watch in self.in_flight]
        self.in_flight.clear()
        self.touched.clear()
        with transaction.atomic():
            for entry, result, watch in results:
                if isinstance(result, EndorsementError):
                    _rejected(entry, str(result))
                    self.count("rejected")
                    watch.finished("rejected", error=str(result))
                elif isinstance(result, LedgerError):  # invalid at commit, or outcome unknown
                    self.put_back(entry, str(result), "retry")
                    watch.finished("retry", error=str(result))
                else:
                    _done(entry, result)
                    self.count("done")
                    watch.finished("done", tx_id=result.tx_id)

    def prepare(self, entry: OutboxEntry) -> dict[str, Any] | None:
        try:
            return hooks.prepare(entry, self.client.sign)
        except hooks.NotReady as wait:
            if self.in_flight:  # its prerequisite may be in flight: let it commit, then look
                self.drain()
                return self.prepare(entry)
            self.put_back(entry, f"waiting: {wait}", "waiting")
            return None

    def add(self, entry: OutboxEntry) -> None:
        mine = subjects(entry.function, entry.args)
        if overlap(mine, self.touched):  # an earlier row about it is in flight: let it commit
            self.drain()
        if self.behind_a_waiting_row(entry, mine):
            why = "waiting: an earlier change to the same ledger record is pending"
            self.put_back(entry, why, "waiting")
            return
        args = self.prepare(entry)
        if args is None:
            return
        watch = Watchers(entry)
        try:
            pending = self.client.submit_async(entry.function, json.dumps(args, sort_keys=True))
        except EndorsementError as exc:
            _rejected(entry, str(exc))
            self.count("rejected")
            watch.finished("rejected", error=str(exc))
            return
        except LedgerUnavailable as exc:
            self.put_back(entry, str(exc), "retry", isinstance(exc, PeersBehind))
            watch.finished("retry", error=str(exc))
            return
        watch.submitted()
        self.in_flight.append((entry, pending, watch))
        self.touched |= mine


def _backing_off(now: datetime, claimed: list[OutboxEntry]) -> list[Waiting]:
    """Pending rows waiting out a back-off, created before the last claimed row: a later
    row about the same record must not overtake one of them."""
    if not claimed:
        return []
    waiting = OutboxEntry.objects.filter(
        status=OutboxEntry.PENDING, next_attempt__gt=now, created__lte=claimed[-1].created
    )
    return [
        ((created, pk), subjects(function, args))
        for created, pk, function, args in waiting.values_list("created", "id", "function", "args")
    ]


def relay_once(client: LedgerClient, batch: int = 100) -> dict[str, int]:
    """Send up to `batch` ready rows, pipelined; returns how many ended each way."""
    now = timezone.now()
    counts: dict[str, int] = {}
    claimed = claim(batch, now)
    pipeline = _Pipeline(client, counts, _backing_off(now, claimed))
    try:
        for entry in claimed:
            pipeline.add(entry)
    finally:
        pipeline.drain()
    return counts
