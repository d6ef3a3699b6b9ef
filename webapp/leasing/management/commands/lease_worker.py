"""`manage.py lease_worker`: the lease lifecycle (webapp/leasing/lifecycle.py) on a
schedule: place and preempt, end leases that ran their hours, settle. Run as many as you
like; they share the work without doing any of it twice."""

from __future__ import annotations

from django.conf import settings

from webapp.core.worker import WorkerCommand
from webapp.leasing.lifecycle import run_pass

ACTOR = "lease-worker"


class Command(WorkerCommand):
    help = "Run the lease lifecycle: placement, expiry, preemption and settlement."

    def run_pass(self) -> dict[str, int]:
        return run_pass(actor=ACTOR, hour_s=settings.LEASE_HOUR_S).as_dict()

    def wait_s(self, counts: dict[str, int]) -> float:
        return settings.LEASE_WORKER_INTERVAL_S
