"""`manage.py attestation_watch`: every CHALLENGE_PASS_S, ask the ledger for the next challenge
of nodes whose agents are due (actions.challenge_ahead); every ATTESTATION_INTERVAL_S, mark
trusted nodes whose last good quote is older than their PCR policy allows as stale (not
leasable)."""

from __future__ import annotations

import time

from django.conf import settings

from webapp.attestation.actions import challenge_ahead, mark_stale
from webapp.core.worker import WorkerCommand

# a fraction of actions.quotes.CHALLENGE_LEAD_S: the relay has the rest to commit the challenge
CHALLENGE_PASS_S = 2.0


class Command(WorkerCommand):
    help = "Ask for the agents' next challenges ahead; mark nodes without a fresh good quote stale."

    staleness_checked = float("-inf")  # monotonic time of the last staleness pass

    def run_pass(self) -> dict[str, int]:
        counts = {}
        asked = challenge_ahead()
        if asked:
            counts["challenges asked ahead"] = asked
        if time.monotonic() - self.staleness_checked >= settings.ATTESTATION_INTERVAL_S:
            self.staleness_checked = time.monotonic()
            stale = mark_stale()
            if stale:
                counts["went stale"] = stale
        return counts

    def wait_s(self, counts: dict[str, int]) -> float:
        return min(CHALLENGE_PASS_S, settings.ATTESTATION_INTERVAL_S)
