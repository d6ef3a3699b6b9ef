"""What the outbox tells other apps about each ledger submission, without knowing them.

`submitting` is sent with `entry=` (the OutboxEntry) just before the relay submits a row. A
receiver may return a watcher, an object with `submitted()` (the ledger took the row for
ordering) and `finished(outcome, tx_id="", error="")` (committed: "done", refused:
"rejected", put back: "retry"). Observability attaches its latency histograms, span and log
line this way."""

from __future__ import annotations

from typing import Any, Protocol

from django.dispatch import Signal

from webapp.outbox.models import OutboxEntry

submitting = Signal()


class Watcher(Protocol):
    def submitted(self) -> None: ...

    def finished(self, outcome: str, tx_id: str = "", error: str = "") -> None: ...


class Watchers:
    """Every watcher the receivers of `submitting` returned for one row."""

    def __init__(self, entry: OutboxEntry) -> None:
        answers = submitting.send(sender=OutboxEntry, entry=entry)
        self.watchers: list[Any] = [watcher for _, watcher in answers if watcher is not None]

    def submitted(self) -> None:
        for watcher in self.watchers:
            watcher.submitted()

    def finished(self, outcome: str, tx_id: str = "", error: str = "") -> None:
        for watcher in self.watchers:
            watcher.finished(outcome, tx_id=tx_id, error=error)
