"""The demo's Slurm cluster: a real one (munged, MariaDB, slurmdbd, slurmctld, one slurmd per
demo node: scheduler/grants/local_cluster.py) generated from the nodes' registered GPUs, so
every lease the demo places is granted there as it would be on an operator's cluster, every
node whose attestation fails is drained there, and each tenant's job runs inside its lease.

The demo machine has no GPUs: each GPU is a device file no driver answers, so a job inside
a lease opens its own GPUs (ENXIO: allowed, nothing behind it) and no other (EPERM: the
job's device cgroup). Each tenant's owner is the cluster user `wl-<tenant>` (a unix user
the demo adds and removes). The cluster lives in a directory under /tmp (its users' jobs
read its slurm.conf and device files, which a private data folder would hide), named in
DATA_DIR/slurm/cluster-dir: a demo that was killed leaves its daemons running, and the next
start stops them first; its leases are granted again by the lease worker's reconcile (a
lease without its grant), its tenants' jobs started again."""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from scheduler.grants import slurm_conf
from scheduler.grants.local_cluster import (
    TMP_PREFIX,
    LocalCluster,
    LocalClusterError,
    LocalNode,
    ensure_unix_user,
    kill_marked,
    remove_unix_user,
)
from webapp.cluster.slots import node_slots
from webapp.fleet.models import Node
from webapp.leasing import states
from webapp.leasing.models import Lease
from webapp.tenancy.models import Membership

log = logging.getLogger("wattlease.demo")

USER_PREFIX = "wl-"
JOB_S = 60  # a demo job's work; the lease's end stops it sooner
# The tenant's job: which of the node's GPU devices it can open (its lease's, and no other),
# then a minute of CPU work in slices, saying what it did.
JOB = """\
import errno, hashlib, os, sys, time
lease, seconds, paths = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
opened = []
for index, path in enumerate(paths):
    try:
        os.close(os.open(path, os.O_RDWR)); opened.append(index)
    except OSError as e:
        if e.errno == errno.ENXIO: opened.append(index)  # granted; no driver behind it
print(f"lease {lease}: job {os.environ.get('SLURM_JOB_ID')} on {os.uname().nodename} "
      f"can open GPUs {opened} of {len(paths)}", flush=True)
digest, began = b"", time.monotonic()
while time.monotonic() - began < seconds:
    for _ in range(20000): digest = hashlib.sha256(digest).digest()
    time.sleep(0.5)
print(f"lease {lease}: done, {digest.hex()[:16]}", flush=True)
"""


def cluster_user(tenant_slug: str) -> str:
    return f"{USER_PREFIX}{tenant_slug}"[:32]


class DemoCluster:
    """`start()` brings the cluster up and points the web app at it; `stop()` takes it down."""

    def __init__(self, data_dir: Path, progress: Callable[[str], object] = print) -> None:
        self.root = Path(data_dir) / "slurm"
        self.progress = progress
        self.cluster: LocalCluster | None = None
        self.users: list[str] = []
        self.jobs: dict[str, subprocess.Popen[bytes]] = {}  # lease id -> its srun

    def start(self, nodes: list[Node]) -> None:
        self._stop_previous()
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        self._map_tenants()
        local = [LocalNode(node.name, "127.0.0.1", tuple(node_slots(node))) for node in nodes]
        self.cluster = LocalCluster(
            local,
            partition=settings.SLURM_PARTITION,
            cluster_name="wattlease-demo",
            extra_conf="JobSubmitPlugins=lua\n",
            extra_files={"job_submit.lua": slurm_conf.job_submit_lua()},
        )
        (self.root / "cluster-dir").write_text(str(self.cluster.root))
        try:
            self.cluster.start()
        except LocalClusterError:
            self.cluster.stop()
            raise
        settings.CLUSTER_BACKEND = "slurm"
        settings.SLURM_CONF = str(self.cluster.conf)
        settings.SLURM_BIN_DIR = str(self.cluster.bin_dir)  # configured() reads these anew
        self.progress(
            f"  Slurm cluster: {len(local)} nodes, "
            f"{sum(len(n.gpus) for n in local)} GPUs as GRES slots; try: "
            f"SLURM_CONF={self.cluster.conf} sinfo -N -o '%N %T %G %E'"
        )

    def _stop_previous(self) -> None:
        """What a killed demo left: its cluster's daemons and directory."""
        with contextlib.suppress(OSError):
            previous = Path((self.root / "cluster-dir").read_text().strip())
            if previous.name.startswith(TMP_PREFIX):  # only ever a directory we made
                kill_marked(previous)
                shutil.rmtree(previous, ignore_errors=True)

    def _map_tenants(self) -> None:
        """Each tenant's owner is a cluster user of its own (the operator's mapping)."""
        for member in Membership.objects.filter(role=Membership.OWNER).select_related("tenant"):
            user = cluster_user(member.tenant.slug)
            ensure_unix_user(user)
            self.users.append(user)
            if member.cluster_user != user:
                member.cluster_user = user
                member.save(update_fields=["cluster_user"])

    def run_tenant_jobs(self) -> None:
        """Each active lease with a grant runs its tenant's job (one at a time), as the
        tenant's cluster user, inside the grant: `srun --jobid=<grant> --overlap`."""
        if self.cluster is None:
            return
        for lease, process in list(self.jobs.items()):
            if process.poll() is not None:
                del self.jobs[lease]
        active = Lease.objects.filter(state=states.ACTIVE).exclude(grants=[])
        for lease in active.exclude(ledger_id__in=list(self.jobs)).exclude(cluster_user=""):
            self.jobs[str(lease.ledger_id)] = self._submit(lease)

    def _submit(self, lease: Lease) -> subprocess.Popen[bytes]:
        assert self.cluster is not None
        grant = lease.grants[0]
        [node] = [n for n in self.cluster.nodes if n.name == grant["node"]]
        paths = [str(self.cluster.node_device(node.name, gpu.index)) for gpu in node.gpus]
        out = (self.root / "jobs" / f"{lease.ledger_id}.log").open("ab")
        argv = self.cluster.command(
            ["srun", f"--jobid={grant['handle']}", "--overlap", "python3", "-c", JOB,
             str(lease.ledger_id), str(JOB_S), *paths],
            user=lease.cluster_user,
        )  # fmt: skip
        log.info("tenant job in lease %s: grant %s on %s", lease.ledger_id, grant["handle"],
                 grant["node"])  # fmt: skip
        with out:
            return subprocess.Popen(
                argv, env=self.cluster.env, cwd=self.cluster.root, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        for process in self.jobs.values():
            if process.poll() is None:
                process.kill()
        if self.cluster is not None:
            self.cluster.stop()
        for user in self.users:
            remove_unix_user(user)
