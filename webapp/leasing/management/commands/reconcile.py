"""`manage.py reconcile`: the database against the ledger; every difference on its own line,
exit status 1 when there is any (docs/operations.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.leasing import cluster_drift
from webapp.leasing.reconcile import drift
from webapp.outbox.ledger import close_ledger_client, ledger_client


class Command(BaseCommand):
    help = (
        "Compare leases, settlements and attestations with the ledger, and the cluster's "
        "grants and node gates with the leases (repairing what is safe); exit 1 on drift."
    )

    def handle(self, *args, **options):
        try:
            found = drift(ledger_client())
        finally:
            close_ledger_client()
        for line in found:
            self.stdout.write(line)
        # the cluster against the leases: what can be put right safely is, the rest reported
        cluster = cluster_drift.findings(repair=True, actor="reconcile")
        for finding in cluster:
            self.stdout.write(f"cluster {finding}")
        left = [f for f in cluster if not f.repaired]
        if found or left:
            raise CommandError(
                f"{len(found)} difference(s) between the database and the ledger, "
                f"{len(left)} between the cluster and the leases left to repair"
            )
        self.stdout.write("no drift: the database agrees with the ledger")
        if cluster_drift.cluster.backend() is not None:
            self.stdout.write(f"the cluster agrees with the leases ({len(cluster)} repaired)")
