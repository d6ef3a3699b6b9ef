"""The demo's background activity, through the same code paths as production: the
lease worker's pass (webapp/leasing/lifecycle.py: placement, preemption, expiry,
settlement), the outbox relay (whose reaction starts a lease once the ledger holds its
contract) and the attestation watch, in one thread, plus a replayed telemetry trace. The
only demo-only parts are a seeded pattern of tenant requests and occasional migrations.
Only leased GPUs work; the others draw idle power at 0 %.

One demo "hour" of lease time passes in DEMO_HOUR_S seconds of wall time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections
from django.db.models import OuterRef, Subquery

from scheduler import api as scheduler
from scheduler.telemetry.synthetic import SyntheticGpu, occupancy_trace
from webapp.attestation.actions import mark_stale
from webapp.demo.agents import signals_to_main_thread
from webapp.demo.cluster import DemoCluster
from webapp.fleet.models import GPU, TelemetrySample
from webapp.fleet.telemetry import record_samples
from webapp.leasing import actions, states
from webapp.leasing.lifecycle import run_pass
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import migrate
from webapp.outbox.ledger import close_ledger_client, ledger_client
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import Tenant

log = logging.getLogger("wattlease.demo")

TICK_S = 2.0
DEMO_HOUR_S = 30.0  # wall seconds per leased hour
MAX_OPEN_REQUESTS = 4
ACTOR = "demo-loop"
TRACE_PIECE_S = 10  # each piece of trace follows the leases as they were when it began
TRACE_STEP_S = 2
TELEMETRY_FLUSH_S = 2.0
MIGRATE_PROBABILITY = 0.05  # per tick
OLD_FAMILIES = ("V100", "A100")
MIGRATION_TARGETS = ("H100-SXM5-80GB", "L40S")


class DemoLoop(threading.Thread):
    def __init__(self, seed: int = 7, cluster: DemoCluster | None = None) -> None:
        super().__init__(name="demo-loop", daemon=True)
        self.cluster = cluster  # its tenants run a job inside each lease it grants
        self.rng = random.Random(seed)
        self.seed = seed
        self.stopping = threading.Event()
        self.telemetry = threading.Thread(target=self.replay, name="demo-telemetry", daemon=True)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        signals_to_main_thread()
        self.telemetry.start()
        client = ledger_client()
        try:
            while not self.stopping.wait(TICK_S):
                try:
                    self.tick(client)
                except Exception:  # the demo keeps going; the log says what broke
                    log.exception("demo tick failed")
                finally:
                    close_old_connections()
        finally:
            close_ledger_client()

    def tick(self, client) -> None:
        """The production workers' passes in one thread (attestation watch, lease worker,
        relay), with the demo's random requests and migrations on top."""
        mark_stale()
        # production's relay is a worker of its own: here it goes first, so a pass that
        # waits on the cluster (grants restored after a restart) never delays a node's nonce
        relay_once(client, settings.OUTBOX_BATCH)
        self.maybe_request()
        run_pass(actor=ACTOR, hour_s=DEMO_HOUR_S)
        relay_once(client, settings.OUTBOX_BATCH)  # a committed contract starts its lease
        self.maybe_migrate()
        relay_once(client, settings.OUTBOX_BATCH)
        if self.cluster is not None:
            self.cluster.run_tenant_jobs()

    def maybe_request(self) -> None:
        if Lease.objects.filter(state=states.REQUESTED).count() >= MAX_OPEN_REQUESTS:
            return
        if self.rng.random() > 0.6:
            return
        tenant = self.rng.choice(list(Tenant.objects.all()))
        try:
            actions.request_lease(
                tenant,
                gpu_count=self.rng.choice([1, 1, 2, 2, 4, 8]),
                precision=self.rng.choice(["FP16", "BF16", "FP32"]),
                hours=Decimal(self.rng.choice(["0.5", "1", "2", "3"])),
                # only what an operator granted the tenant (the seed grants one of them 5)
                priority=min(self.rng.choice([0, 0, 0, 1, 5]), tenant.max_priority),
                actor=ACTOR,
            )
        except actions.LeaseError as refused:  # over the tenant's quota: a tenant would wait
            log.info("demo request of %s refused: %s", tenant.slug, refused)

    def maybe_migrate(self) -> None:
        """Now and then, move a lease off an older generation onto a more efficient one
        (the scheduler refuses when the target has no free attested capacity)."""
        if self.rng.random() > MIGRATE_PROBABILITY:
            return
        lease = (
            Lease.objects.filter(state=states.ACTIVE, gpus__generation__family__in=OLD_FAMILIES)
            .distinct()
            .first()
        )
        if lease is None:
            return
        for target in MIGRATION_TARGETS:
            try:
                migrate(lease, target, actor=ACTOR)
                log.info("lease %s moved to %s", lease.pk, target)
                return
            except (actions.LeaseError, states.IllegalTransition):
                continue

    def replay(self) -> None:
        """Telemetry of the fleet as it is leased: every TRACE_PIECE_S a piece of trace is
        generated in which only GPUs of active leases work (the others draw idle power at
        0 %), written to a file and replayed in real time, the way the telemetry worker
        replays a trace."""
        signals_to_main_thread()
        fleet = [
            SyntheticGpu(uuid, int(power))
            for uuid, power in GPU.objects.values_list("uuid", "generation__board_power_w")
        ]
        path = Path(settings.DATA_DIR) / "demo-trace.csv"
        rng, energy = random.Random(self.seed), newest_counters()
        piece_start = time.time_ns() // 1_000_000
        while not self.stopping.is_set():
            leased = set(
                GPU.objects.filter(leases__state=states.ACTIVE).values_list("uuid", flat=True)
            )
            scheduler.write_trace(
                occupancy_trace(
                    fleet, leased, piece_start, TRACE_PIECE_S, TRACE_STEP_S, rng, energy
                ),
                path,
            )
            first_due_s = (piece_start + TRACE_STEP_S * 1000 - time.time_ns() // 1_000_000) / 1000
            if first_due_s > 0 and self.stopping.wait(first_due_s):
                return
            batch, flushed = [], time.monotonic()
            for sample in scheduler.ReplaySource(path, speed=1.0):
                if self.stopping.is_set():
                    return
                batch.append(sample)
                if time.monotonic() - flushed >= TELEMETRY_FLUSH_S:
                    record_samples(batch)
                    batch, flushed = [], time.monotonic()
            record_samples(batch)
            close_old_connections()
            piece_start += TRACE_PIECE_S * 1000


def newest_counters() -> dict[str, int]:
    """Each GPU's newest total-energy counter (mJ) on record, so the trace of a restarted
    demo continues the counters instead of starting them anew: a counter that jumped across
    a restart would measure energy no GPU drew, and the ledger would refuse its bill line."""
    newest = TelemetrySample.objects.filter(gpu=OuterRef("pk")).order_by("-t_ms")
    rows = GPU.objects.annotate(mj=Subquery(newest.values("energy_mj")[:1]))
    return {uuid: mj for uuid, mj in rows.values_list("uuid", "mj") if mj is not None}
