"""The demo's background activity: tenants request leases, the scheduler places them, GPUs
report telemetry, leases end and are settled against the energy they drew.

Every step goes through the same actions and libraries as production; the only demo-only
parts are the tenants' request pattern and the telemetry source (a synthetic trace).
One demo "hour" of lease time passes in DEMO_HOUR_S seconds of wall time.
"""

from __future__ import annotations

import logging
import random
import threading
from decimal import Decimal

from django.db import close_old_connections

from webapp.core.demo_agents import signals_to_main_thread
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.tenancy.models import Tenant

log = logging.getLogger("wattlease.demo")

TICK_S = 2.0
DEMO_HOUR_S = 30.0  # wall seconds per leased hour
MAX_OPEN_REQUESTS = 4
ACTOR = "demo-loop"


class DemoLoop(threading.Thread):
    def __init__(self, seed: int = 7) -> None:
        super().__init__(name="demo-loop", daemon=True)
        self.rng = random.Random(seed)
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        signals_to_main_thread()
        while not self.stopping.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # the demo keeps going; the log says what broke
                log.exception("demo tick failed")
            finally:
                close_old_connections()

    def tick(self) -> None:
        self.maybe_request()
        for lease in Lease.objects.filter(state=states.PLACED):
            actions.activate_lease(lease, actor=ACTOR)
        self.end_due()

    def maybe_request(self) -> None:
        if Lease.objects.filter(state=states.REQUESTED).count() >= MAX_OPEN_REQUESTS:
            return
        if self.rng.random() > 0.6:
            return
        tenant = self.rng.choice(list(Tenant.objects.all()))
        actions.request_lease(
            tenant,
            gpu_count=self.rng.choice([1, 1, 2, 2, 4, 8]),
            precision=self.rng.choice(["FP16", "BF16", "FP32"]),
            hours=Decimal(self.rng.choice(["0.5", "1", "2", "3"])),
            priority=self.rng.choice([0, 0, 0, 1, 5]),
            actor=ACTOR,
        )

    def end_due(self) -> None:
        from django.utils import timezone

        now = timezone.now()
        for lease in Lease.objects.filter(state=states.ACTIVE, started__isnull=False):
            ran_s = (now - lease.started).total_seconds()
            if ran_s >= float(lease.hours) * DEMO_HOUR_S:
                actions.end_lease(lease, actor=ACTOR)
