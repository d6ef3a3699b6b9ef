"""`manage.py telemetry_retention`: keep the telemetry store within its retention
(webapp/leasing/retention.py): create the coming days' partitions, copy the readings bill
lines cite to their evidence, drop the days past TELEMETRY_RETENTION_DAYS, delete rollups
past TELEMETRY_ROLLUP_RETENTION_DAYS. Run it as a worker (every
TELEMETRY_RETENTION_INTERVAL_S) or from cron with --once."""

from __future__ import annotations

from django.conf import settings

from webapp.core.worker import WorkerCommand
from webapp.leasing.retention import apply_retention


class Command(WorkerCommand):
    help = "Create upcoming telemetry partitions and drop those past their retention."

    def run_pass(self) -> dict[str, int]:
        return apply_retention().as_dict()

    def wait_s(self, counts: dict[str, int]) -> float:
        return settings.TELEMETRY_RETENTION_INTERVAL_S
