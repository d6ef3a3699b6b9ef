"""`manage.py attestation_watch`: every ATTESTATION_INTERVAL_S, mark trusted nodes whose
last good quote is older than their PCR policy allows as stale (not leasable)."""

from __future__ import annotations

from django.conf import settings

from webapp.attestation.actions import mark_stale
from webapp.core.worker import WorkerCommand


class Command(WorkerCommand):
    help = "Mark nodes without a fresh good quote as stale, on a schedule."

    def run_pass(self) -> dict[str, int]:
        stale = mark_stale()
        return {"went stale": stale} if stale else {}

    def wait_s(self, counts: dict[str, int]) -> float:
        return settings.ATTESTATION_INTERVAL_S
