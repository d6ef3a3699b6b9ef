"""`manage.py timeline --lease ID`: the lease's audit events, attestations, ledger commits
and cost changes interleaved on one UTC axis; exit 1 when an audit event and the cost
change it caused are further apart than --tolerance seconds."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.leasing.models import Lease
from webapp.leasing.timeline import DEFAULT_TOLERANCE_S, timeline


class Command(BaseCommand):
    help = "Show one lease's history on one time axis and flag costs out of step."

    def add_arguments(self, parser):
        parser.add_argument("--lease", type=int, required=True, help="the lease's id")
        parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE_S)

    def handle(self, *args, lease: int, tolerance: float, **options):
        found = Lease.objects.filter(pk=lease).first()
        if found is None:
            raise CommandError(f"--lease {lease}: no such lease")
        result = timeline(found, tolerance)
        for moment in result.moments:
            self.stdout.write(moment.line())
        for flag in result.flags:
            self.stdout.write(f"FLAG {flag}")
        if result.flags:
            raise CommandError(f"{len(result.flags)} cost change(s) out of step with the audit")
