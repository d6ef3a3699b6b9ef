"""The local Slurm cluster launcher, against real daemons (munged, MariaDB, slurmdbd,
slurmctld, slurmd): it starts, its nodes show their GPUs, jobs run and are accounted, the cgroup
gives a job exactly its GPU, a controller restart keeps jobs, and stopping leaves nothing.

Needs root and Debian's Slurm, munge and MariaDB packages; when they are missing the tests
fail with the launcher's message (SlurmNotInstalled), never skip.

The network-namespace test comes first on purpose: Slurm's cgroup v1 hierarchy is named after
the node (`slurm_n1`), so it should not run beside the module's loopback cluster, which also
has an n1 and starts at its first use."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.grants import local_cluster
from scheduler.grants.interface import GpuSlot
from scheduler.grants.local_cluster import CONTROLLER, LocalCluster, LocalNode
from tests.fabric.netns import Hosts

LOOPBACK = "127.0.0.1"


def gpus(node: str, generation: str, count: int) -> tuple[GpuSlot, ...]:
    return tuple(GpuSlot(f"GPU-{node}-{i}", node, i, generation) for i in range(count))


NODES = (
    LocalNode("n1", LOOPBACK, gpus("n1", "A100", 2)),
    LocalNode("n2", LOOPBACK, gpus("n2", "H100", 1)),
)
JOB_DONE_S = 15.0
JOB_START_S = 15.0
POLL_S = 0.25
DAEMONS = {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"}

# Run inside a job: how opening each device file fails (ENXIO: allowed, no driver behind it;
# EPERM: the job's device cgroup forbids it).
PROBE = """
import errno, os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "OPENED")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(NODES) as running:
        yield running


def _ok(cluster: LocalCluster, argv: list[str], host: str | None = CONTROLLER) -> str:
    done = cluster.run(argv, host=host)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}\n{cluster.logs()}"
    return done.stdout


def _submit(cluster: LocalCluster, command: str) -> str:
    return _ok(cluster, ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", command]).strip()


def _wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, cluster: LocalCluster
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s\n{cluster.logs()}"
        time.sleep(POLL_S)


def _accounted_state(cluster: LocalCluster, job: str) -> str:
    return _ok(cluster, ["sacct", "-j", job, "-X", "-n", "-P", "-o", "JobID,State"]).strip()


def _queue_state(cluster: LocalCluster, job: str) -> str:
    return _ok(cluster, ["squeue", "-h", "-j", job, "-o", "%T"]).strip()


def _alive(pid: int) -> bool:
    """Running, not a zombie (nothing here reaps orphans that PID 1 inherits)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _names(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


def test_runs_jobs_on_nodes_in_their_own_network_namespaces() -> None:
    with Hosts(["ctl", "n1"]) as hosts:

        def on_host(role: str) -> list[str]:
            namespace = hosts.namespaces["ctl" if role == CONTROLLER else role]
            return ["nsenter", f"--net=/run/netns/{namespace}", "--"]

        node = LocalNode("n1", hosts.addresses["n1"], gpus("n1", "A100", 1))
        with LocalCluster(
            [node], controller_address=hosts.addresses["ctl"], spawn_prefix=on_host
        ) as split:
            assert _ok(split, ["sinfo", "-h", "-N", "-o", "%N %T %G"]).split() == [
                "n1",
                "idle",
                "gpu:a100_0:1",
            ]
            job = _submit(split, "hostname")
            _wait_for(
                "job COMPLETED",
                lambda: _accounted_state(split, job) == f"{job}|COMPLETED",
                JOB_DONE_S,
                split,
            )
            pids = split.pids()
        assert not [pid for pid in pids if _alive(pid)]
        assert hosts.pids() == []
    assert hosts.exists() == []


def test_sinfo_shows_every_node_idle_with_its_gpus(cluster: LocalCluster) -> None:
    rows = _ok(cluster, ["sinfo", "-h", "-N", "-o", "%N %T %G"]).splitlines()
    assert sorted(rows) == ["n1 idle gpu:a100_0:1,gpu:a100_1:1", "n2 idle gpu:h100_0:1"]


def test_batch_job_runs_and_is_accounted(cluster: LocalCluster) -> None:
    job = _submit(cluster, "true")
    _wait_for(
        "job COMPLETED in sacct",
        lambda: _accounted_state(cluster, job) == f"{job}|COMPLETED",
        JOB_DONE_S,
        cluster,
    )


def test_job_sees_exactly_the_gpu_it_was_given(cluster: LocalCluster) -> None:
    granted, other = cluster.node_device("n1", 1), cluster.node_device("n1", 0)
    out = _ok(
        cluster,
        [
            "srun",
            "-w",
            "n1",
            "--gres=gpu:a100_1:1",
            "python3",
            "-c",
            PROBE,
            str(granted),
            str(other),
        ],
    )
    seen = dict(line.split() for line in out.splitlines())
    assert seen == {
        str(granted): errno.errorcode[errno.ENXIO],
        str(other): errno.errorcode[errno.EPERM],
    }


def test_controller_restart_keeps_a_running_job(cluster: LocalCluster) -> None:
    job = _submit(cluster, "sleep 300")
    try:
        _wait_for(
            "job RUNNING", lambda: _queue_state(cluster, job) == "RUNNING", JOB_START_S, cluster
        )
        cluster.restart_controller()
        assert _queue_state(cluster, job) == "RUNNING"
    finally:
        cluster.run(["scancel", job])


def test_stop_leaves_no_process_and_no_directory() -> None:
    with LocalCluster([LocalNode("s1", LOOPBACK, gpus("s1", "A100", 1))]) as solo:
        job = _submit(solo, "sleep 300")  # stop must end a running job too
        _wait_for("job RUNNING", lambda: _queue_state(solo, job) == "RUNNING", JOB_START_S, solo)
        pids, root = solo.pids(), solo.root
        assert DAEMONS | {"slurmstepd", "sleep"} <= _names(pids), _names(pids)
    assert not [pid for pid in pids if _alive(pid)]
    assert solo.pids() == []
    assert not root.exists()
    assert os.getpid() not in pids


def test_missing_program_fails_naming_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_cluster, "REQUIRED", (*local_cluster.REQUIRED, "slurmd-nowhere"))
    with pytest.raises(local_cluster.SlurmNotInstalled, match=r"slurmd-nowhere.*make setup"):
        LocalCluster(NODES)
