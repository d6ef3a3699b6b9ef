"""A lease is the cluster's own access control, on real daemons: slurmctld, slurmdbd (with
MariaDB) and the node's slurmd each on a host of its own (network namespaces), munge, the
cgroup device controller, a real swtpm behind the node's attestation and the embedded ledger.

What the tests show: a lease is granted exactly its GPUs before it is placed and billed from
the grant; a step inside it sees exactly those devices; another tenant, and a job outside any
lease, cannot use them; ending revokes within the bound; a refused grant fails the lease
unbilled; attestation drains and resumes the node; reconcile repairs lost and stray grants; a
slurmctld restart loses nothing. Needs root and Debian's Slurm packages: a missing Slurm
fails here with what to install, never skips."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command

from ledger.units import ms_of
from scheduler.grants import slurm_conf
from scheduler.grants.interface import REVOKE_BOUND_S, GpuSlot
from scheduler.grants.local_cluster import (
    CONTROLLER,
    LocalCluster,
    LocalNode,
    ensure_unix_user,
    remove_unix_user,
)
from scheduler.grants.slurm import SlurmBackend
from tests.fabric.netns import Hosts
from webapp.cluster import backend as backends
from webapp.core.models import AuditEvent
from webapp.fleet.models import Node
from webapp.leasing import states
from webapp.leasing.lifecycle import run_pass
from webapp.leasing.models import Lease
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import Membership, Tenant

NODE = "node-1"  # the fleet fixture's node, its GPUs made two A100s and two L40S here
GENERATIONS = ("A100-SXM4-80GB", "A100-SXM4-80GB", "L40S", "L40S")  # by device index
# unix users of this run only: a second run on the machine must not remove ours (ghost:
# mapped, no such user)
RUN = format(os.getpid(), "x")
ALICE, BOB, GHOST = (f"wlt-{name}-{RUN}" for name in ("alice", "bob", "ghost"))
CONTROLLER_NS: dict = {}  # slurm.conf -> the namespace of its controller's host
REQUEST = {"gpu_count": 2, "precision": "FP16", "hours": "1"}
PROBE = (
    "import errno,os,sys\n"
    "for p in sys.argv[1:]:\n"
    "    try: os.close(os.open(p, os.O_RDWR)); print('OPEN')\n"
    "    except OSError as e: print(errno.errorcode[e.errno])\n"
)


def slot(index: int) -> GpuSlot:
    return GpuSlot(f"g{index}", NODE, index, GENERATIONS[index])


@pytest.fixture(autouse=True)
def mixed_fleet(fleet):
    """The node's GPUs as the cluster's gres.conf has them (before the node registers), so
    a lease can migrate to the other generation on the same node."""
    from webapp.fleet.models import GPU, Generation

    for index, generation in enumerate(GENERATIONS):
        GPU.objects.filter(node=fleet.node, index=index).update(
            generation=Generation.objects.get(catalogue_id=generation)
        )


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    for user in (ALICE, BOB):
        ensure_unix_user(user)
    try:
        with Hosts(["ctl", NODE]) as hosts:
            ns = hosts.namespaces

            def prefix(role: str) -> list[str]:
                host = ns["ctl"] if role == CONTROLLER else ns[role]
                return ["nsenter", f"--net=/run/netns/{host}", "--"]

            nodes = [LocalNode(NODE, hosts.addresses[NODE], tuple(slot(i) for i in range(4)))]
            with LocalCluster(
                nodes,
                controller_address=hosts.addresses["ctl"],
                spawn_prefix=prefix,
                extra_conf="JobSubmitPlugins=lua\n",
                extra_files={"job_submit.lua": slurm_conf.job_submit_lua()},
            ) as running:
                CONTROLLER_NS[running.conf] = ns["ctl"]
                yield running
    finally:
        for user in (ALICE, BOB):
            remove_unix_user(user)


@pytest.fixture
def slurm(cluster, monkeypatch) -> SlurmBackend:
    """The real backend on the test's cluster, its commands run on the controller's host."""
    backend = SlurmBackend(conf=cluster.conf, netns=CONTROLLER_NS[cluster.conf])
    monkeypatch.setattr(backends, "configured", lambda: backend)
    yield backend
    for grant in backend.grants():  # each test starts with a cluster holding nothing
        backend.release([grant.handle])
    for gate in backend.nodes().values():
        if gate.drained:
            backend.resume(gate.node)


@pytest.fixture
def acme(owner):
    """The owner's tenant with ALICE mapped to one of its members."""
    from django.contrib.auth.models import User

    user = User.objects.create_user("alice")
    Membership.objects.create(user=user, tenant=owner.tenant, role="owner", cluster_user=ALICE)
    return owner


def srun(cluster, user: str, job: str, *argv: str, timeout: float = 30):
    return cluster.run(["srun", f"--jobid={job}", "--overlap", *argv], user=user, timeout=timeout)


def probe(cluster, user: str, job: str, timeout: float = 30) -> list[str]:
    paths = [str(cluster.node_device(NODE, i)) for i in range(4)]
    done = srun(cluster, user, job, "python3", "-c", PROBE, *paths, timeout=timeout)
    assert done.returncode == 0, done.stderr + cluster.logs()
    return done.stdout.split()


def placed_lease(acme, ledger) -> Lease:
    lease_id = acme.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    result = run_pass(actor="worker")
    assert result.placed == 1, Lease.objects.get(pk=lease_id).reason
    relay_once(ledger)
    return Lease.objects.get(pk=lease_id)


def test_a_lease_is_granted_exactly_its_gpus_and_billed_from_the_grant(
    slurm, cluster, acme, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    assert lease.state == states.ACTIVE
    [grant] = lease.grants
    leased = sorted(g.index for g in lease.gpus.all())
    assert grant["node"] == NODE and sorted(grant["gpus"]) == sorted(
        g.uuid for g in lease.gpus.all()
    )
    assert lease.terms["start_ms"] == ms_of(lease.granted)  # billing starts with access
    seen = probe(cluster, ALICE, grant["handle"])
    assert [i for i, errno in enumerate(seen) if errno == "ENXIO"] == leased
    assert all(seen[i] == "EPERM" for i in range(4) if i not in leased)
    # the API shows how to run inside it, and the accounting shows the step
    shown = acme.client.get(f"/api/v1/leases/{lease.pk}/").json()["cluster"]
    assert shown["submit"] == [f"srun --jobid={grant['handle']} --overlap <command>"]
    jobs = acme.client.get(f"/api/v1/leases/{lease.pk}/jobs/").json()
    assert any(j["user"] == ALICE and j["gpus"] == 2 for j in jobs), jobs


def test_another_tenant_and_a_job_outside_any_lease_cannot_use_the_leased_gpus(
    slurm, cluster, acme, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    handle = lease.grants[0]["handle"]
    refused = srun(cluster, BOB, handle, "true")
    assert refused.returncode != 0 and "denied" in refused.stderr.lower()
    index = lease.gpus.order_by("index").first().index
    outside = cluster.run(
        ["sbatch", f"--gres={slurm_conf.gres_request([slot(index)])}", "--wrap=true"], user=BOB
    )
    assert outside.returncode != 0 and "leased through Wattlease" in outside.stderr
    # the holder cannot extend the grant from inside it
    longer = cluster.run(["scontrol", "update", f"JobId={handle}", "TimeLimit=99999"], user=ALICE)
    assert longer.returncode != 0


@contextlib.contextmanager
def running_step(cluster, slurm, handle: str) -> Iterator[subprocess.Popen]:
    """A tenant's long step running inside grant `handle` (started and seen by accounting)."""
    step = subprocess.Popen(
        [*cluster.prefix(CONTROLLER), "runuser", "-u", ALICE, "--", "srun", f"--jobid={handle}",
         "--overlap", "sleep", "300"], env=cluster.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while not any(j.job_id.startswith(f"{handle}.") for j in slurm.jobs([handle])):
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
        yield step
    finally:
        with contextlib.suppress(ProcessLookupError):
            step.kill()


def stopped_within_the_bound(step: subprocess.Popen, started: float) -> bool:
    step.wait(timeout=REVOKE_BOUND_S)
    return time.monotonic() - started <= REVOKE_BOUND_S


def test_ending_a_lease_stops_its_jobs_within_the_bound(
    slurm, cluster, acme, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    with running_step(cluster, slurm, lease.grants[0]["handle"]) as step:
        assert acme.client.post(f"/api/v1/leases/{lease.pk}/end/").status_code == 200
        started = time.monotonic()
        assert run_pass(actor="worker").revoked == 1
        assert stopped_within_the_bound(step, started)
    assert slurm.grants() == []
    assert Lease.objects.get(pk=lease.pk).revoked is not None


def test_preempting_a_lease_stops_its_jobs_within_the_bound(
    slurm, cluster, acme, attested_node, ledger
):
    from webapp.leasing import actions

    lease = placed_lease(acme, ledger)
    with running_step(cluster, slurm, lease.grants[0]["handle"]) as step:
        actions.preempt_lease(lease, reason="preempted by lease 99", actor="worker")
        started = time.monotonic()
        assert run_pass(actor="worker").revoked == 1
        assert stopped_within_the_bound(step, started)
    assert slurm.grants() == []


def test_cancelling_a_placed_lease_takes_its_grant_away(slurm, cluster, acme, attested_node):
    lease_id = acme.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    assert run_pass(actor="worker").placed == 1  # granted and placed, not on the ledger yet
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == states.PLACED and slurm.grants()
    assert acme.client.post(f"/api/v1/leases/{lease_id}/cancel/").status_code == 200
    assert run_pass(actor="worker").revoked == 1
    assert slurm.grants() == []
    refused = srun(cluster, ALICE, lease.grants[0]["handle"], "true")
    assert refused.returncode != 0


def test_a_migration_moves_the_grant_and_stops_the_jobs_of_the_old_one(
    slurm, cluster, acme, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    old = lease.grants[0]["handle"]
    before = sorted(g.index for g in lease.gpus.all())
    with running_step(cluster, slurm, old) as step:
        started = time.monotonic()
        [other] = {*GENERATIONS} - {g.generation.catalogue_id for g in lease.gpus.all()}
        moved = acme.client.post(
            f"/api/v1/leases/{lease.pk}/migrate/", {"generation": other}, format="json"
        )
        assert moved.status_code == 200, moved.json()
        assert stopped_within_the_bound(step, started)
    lease.refresh_from_db()
    [grant] = lease.grants
    after = sorted(g.index for g in lease.gpus.all())
    assert grant["handle"] != old and set(after).isdisjoint(before)
    assert [g.handle for g in slurm.grants()] == [grant["handle"]]
    seen = probe(cluster, ALICE, grant["handle"])
    assert [i for i, errno in enumerate(seen) if errno == "ENXIO"] == after


def test_a_tenant_sees_no_other_tenants_lease_grant_or_jobs(
    slurm, cluster, acme, outsider, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    assert outsider.client.get(f"/api/v1/leases/{lease.pk}/").status_code == 404
    assert outsider.client.get(f"/api/v1/leases/{lease.pk}/jobs/").status_code == 404
    assert outsider.client.post(f"/api/v1/leases/{lease.pk}/end/").status_code == 404
    assert slurm.grants()[0].lease == str(lease.ledger_id)


def test_a_grant_the_cluster_refuses_fails_the_lease_unbilled(
    slurm, cluster, acme, attested_node, ledger
):
    from django.contrib.auth.models import User

    ghost = User.objects.create_user("ghost")
    Membership.objects.create(user=ghost, tenant=acme.tenant, role="member", cluster_user=GHOST)
    asked = {**REQUEST, "cluster_user": GHOST}
    lease_id = acme.client.post("/api/v1/leases/", asked, format="json").json()["id"]
    run_pass(actor="worker")
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == states.FAILED
    assert "not a user on this host" in lease.reason
    assert lease.started is None and lease.grants == []
    assert not OutboxEntry.objects.filter(function="CreateLease").exists()  # never billed
    assert slurm.grants() == []


def test_a_cluster_user_of_no_member_is_refused_with_an_audit_row(slurm, acme, fleet):
    answer = acme.client.post("/api/v1/leases/", {**REQUEST, "cluster_user": BOB}, format="json")
    assert answer.status_code == 400
    assert "maps to no member of tenant" in str(answer.json())
    assert AuditEvent.objects.filter(action="lease.refused").exists()
    assert not Lease.objects.exists()


def test_attestation_drains_the_node_with_the_reason_and_resumes_it(
    slurm, cluster, acme, attested_node, ledger
):
    Node.objects.filter(name=NODE).update(trust=Node.STALE)
    assert run_pass(actor="worker").repaired == 1
    gate = slurm.nodes()[NODE]
    assert gate.drained and gate.reason.startswith("attestation stale")
    Node.objects.filter(name=NODE).update(trust=Node.TRUSTED)
    run_pass(actor="worker")
    assert not slurm.nodes()[NODE].drained
    # an operator's drain for maintenance is not Wattlease's to lift
    slurm.drain(NODE, "maintenance: new PSU")
    run_pass(actor="worker")
    assert slurm.nodes()[NODE].reason == "maintenance: new PSU"


@pytest.fixture
def operator_page(db):
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_user("op", "", "pw", is_staff=True))
    return lambda: client.get(f"/ops/nodes/{NODE}/").content.decode()


def gate_rows(page: str) -> str:
    return page[page.index('id="gate"') : page.index("</section>", page.index('id="gate"'))]


def test_the_operator_console_shows_attestation_and_the_cluster_side_by_side(
    slurm, cluster, attested_node, operator_page
):
    Node.objects.filter(name=NODE).update(trust=Node.STALE)
    shown = gate_rows(operator_page())
    # the attestation says no work; the cluster has not been told yet: flagged
    assert "attestation stale" in shown and 'id="gate-disagrees"' in shown
    assert "drains the node" in shown
    run_pass(actor="worker")
    shown = gate_rows(operator_page())
    # both sides now agree, each with its own state and reason
    assert 'id="gate-disagrees"' not in shown
    assert "(drained)" in shown and shown.count("attestation stale") == 2
    # the node attests again while Slurm still holds it drained: flagged the other way
    Node.objects.filter(name=NODE).update(trust=Node.TRUSTED)
    shown = gate_rows(operator_page())
    assert 'id="gate-disagrees"' in shown and "resumes it" in shown


def test_the_operator_console_says_when_the_cluster_cannot_be_asked(
    slurm, cluster, attested_node, operator_page
):
    cluster.stop_controller()
    try:
        shown = gate_rows(operator_page())
    finally:
        cluster.start_controller()
    assert "could not be asked for this node's state" in shown
    assert Node.TRUSTED in shown  # the attestation side is still shown


def test_reconcile_restores_a_lost_grant_and_revokes_a_stray_one(
    slurm, cluster, acme, attested_node, ledger
):
    lease = placed_lease(acme, ledger)
    lost = lease.grants[0]["handle"]
    assert cluster.run(["scancel", lost]).returncode == 0  # behind Wattlease's back
    deadline = time.monotonic() + 15
    while slurm.grants():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "granted again" in out.getvalue()
    lease.refresh_from_db()
    assert lease.grants[0]["handle"] != lost and slurm.grants()[0].running
    # a grant whose lease is over (its end never reached the cluster) is revoked
    Lease.objects.filter(pk=lease.pk).update(state=states.ENDING)
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "revoked" in out.getvalue() and slurm.grants() == []


def test_a_slurmctld_restart_loses_no_grant(slurm, cluster, acme, attested_node, ledger):
    lease = placed_lease(acme, ledger)
    before = [(g.handle, g.slots) for g in slurm.grants()]
    cluster.restart_controller()
    assert [(g.handle, g.slots) for g in slurm.grants()] == before
    # a step into a grant waits for the node's slurmd to register with the new slurmctld
    # (docs/operations.md, "slurmctld restarts"): seconds, not a lost grant
    deadline = time.monotonic() + 60
    while not slurm.nodes()[NODE].registered:
        assert time.monotonic() < deadline, "the node never registered again"
        time.sleep(0.5)
    assert probe(cluster, ALICE, lease.grants[0]["handle"]).count("ENXIO") == 2
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "the cluster agrees with the leases (0 repaired)" in out.getvalue()


def test_a_cluster_that_cannot_be_asked_keeps_the_request_waiting(
    slurm, cluster, acme, attested_node, ledger
):
    cluster.stop_controller()
    try:
        lease_id = acme.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
        run_pass(actor="worker")
        lease = Lease.objects.get(pk=lease_id)
        assert lease.state == states.REQUESTED and "the cluster" in lease.reason
    finally:
        cluster.start_controller()
    assert run_pass(actor="worker").placed == 1  # nothing lost: the next pass grants it
    assert Tenant.objects.get(pk=acme.tenant.pk).leases.get(pk=lease_id).grants
