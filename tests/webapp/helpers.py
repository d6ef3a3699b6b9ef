"""Leases at real terms and their bill lines, for web app tests that place by hand."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.test import Client

from attest.readings import row_text
from scheduler.api import AttestedBatch, IntervalSettlement, settle
from scheduler.settlement import telemetry_digest
from scheduler.telemetry.sample import TelemetrySample
from tests.ledger.helpers import A100, lease_terms, now_ms
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.tenancy.models import Membership, Tenant

ACTOR = "test"
STARTED_AGO_MS = 120_000  # lines of the first minute end before the ledger's clock


def place(lease: Lease, gpus: Sequence, attestations: Sequence, *, actor: str = ACTOR) -> Lease:
    """Place `lease` on A100 `gpus` at terms the ledger's rate card accepts, from
    STARTED_AGO_MS ago, or from when an earlier lease let the GPUs go (the ledger sells a
    GPU's time once: [gpu.time_held])."""
    start = now_ms() - STARTED_AGO_MS
    for earlier in Lease.objects.filter(gpus__in=gpus, ended__isnull=False).distinct():
        start = max(start, earlier.ended_ms)
    terms = lease_terms([g.uuid for g in gpus], generation=A100, start_ms=start)
    return actions.place_lease(
        lease, gpus, price={}, terms=terms, attestations=attestations, actor=actor
    )


def lines(
    lease: Lease, *, count: int = 1, watts: int = 0, seconds: int = 60, final: bool = True
) -> list[IntervalSettlement]:
    """The scheduler's next `count` bill lines of `lease`, `seconds` each, from where its bill
    stands, every GPU drawing `watts` (two counter readings per GPU and line, each GPU's a
    batch as if a quote had attested it: these lines are for the web app's own records; the
    ledger accepts energy only from batches a real quote bound, see
    tests/webapp/leasing/test_migration)."""
    last = lease.settlements.order_by("-seq").first()
    start, seq = (last.end_ms, last.seq + 1) if last else (lease.terms["start_ms"], 0)
    out = []
    for n in range(count):
        end = start + seconds * 1000
        batches = []  # none when nothing is drawn: a line of no energy needs no readings
        for gpu in lease.terms["attributed_power_mw"] if watts else ():
            samples = tuple(
                TelemetrySample(gpu, t, (t - start) * watts, watts * 1000, 90, 50, 60)
                for t in (start, end)
            )
            batches.append(AttestedBatch(gpu, telemetry_digest(samples), samples))
        last_one = final and n == count - 1
        out.append(
            settle(str(lease.ledger_id), seq + n, lease.terms, batches, start, end, final=last_one)
        )
        start = end
    return out


def drawn(gpus: Sequence, start_ms: int, end_ms: int, watts: int) -> str:
    """Readings as a node agent sends them with its quote: every GPU drawing `watts` from
    `start_ms` to `end_ms` (two counter readings each), canonical CSV rows."""
    return "".join(
        row_text(
            TelemetrySample(
                g.uuid, t, 10**6 + (t - start_ms) * watts, watts * 1000, 90, 50, 60
            ).canonical()
        )
        + "\n"
        for g in gpus
        for t in (start_ms, end_ms)
    )


def line(lease: Lease, *, watts: int = 0, final: bool = True) -> IntervalSettlement:
    """The next one-minute bill line of `lease`."""
    return lines(lease, watts=watts, final=final)[0]


@dataclass
class Login:
    membership: Membership
    client: Client


def console_login(tenant: Tenant, name: str, role: str, password: str) -> Login:
    """A console user of `tenant` in `role`, logged in."""
    user = get_user_model().objects.create_user(name, "", password)
    membership = Membership.objects.create(user=user, tenant=tenant, role=role)
    client = Client()
    client.force_login(user)
    return Login(membership, client)


def trust_ek_ca(settings, tmp_path: Path, ca) -> Path:
    """The swtpm CA's root and issuer as the web app's trusted EK CAs (TPM_EK_CA_DIR)."""
    directory = tmp_path / "ek-ca"
    directory.mkdir()
    shutil.copy(ca.root_cert_file, directory / "root.pem")
    shutil.copy(ca.issuer_cert_file, directory / "issuer.pem")
    settings.TPM_EK_CA_DIR = directory
    return directory
