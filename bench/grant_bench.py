"""How fast a lease becomes usable on Slurm, and how fast it stops being: the grant interface
(scheduler/grants/slurm.py) against a private real cluster (scheduler/grants/local_cluster.py:
munge, MariaDB, slurmdbd, slurmctld, one slurmd per node on loopback).

    python bench/grant_bench.py [--nodes 10] [--gpus-per-node 4] [--concurrency 40] [--rounds 2]

Each round grants `--concurrency` one-GPU leases at once (one thread each, as concurrent
placement passes would), then, per lease, times: the grant (sbatch until Slurm holds exactly
its GPU) and the first step (`srun --jobid=<grant> --overlap true` as the tenant's user: the
moment a job can start inside the lease). Then it revokes them all at once and times each
revocation (scancel until Slurm shows the job gone; a `sleep` step runs inside each). The
same round once more with one lease at a time, and as one placement pass grants them
(`grant_many`: every sbatch first, then all awaited together; grant_s is the whole pass).
Prints p50/p99 seconds and the CPU seconds slurmctld and this
process used. Needs root and Debian's Slurm packages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.grants import slurm_conf
from scheduler.grants.interface import GpuSlot, GrantRequest
from scheduler.grants.local_cluster import (
    LocalCluster,
    LocalGpu,
    LocalNode,
    ensure_unix_user,
    remove_unix_user,
)
from scheduler.grants.slurm import SlurmBackend

USER, ACCOUNT, GENERATION = "wlt-bench", "bench", "A100-SXM4-80GB"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def slots(nodes: int, per_node: int) -> list[GpuSlot]:
    return [
        GpuSlot(f"GPU-{n}-{i}", f"bench-{n}", i, GENERATION)
        for n in range(nodes)
        for i in range(per_node)
    ]


def one_lease(cluster: LocalCluster, backend: SlurmBackend, gpu: GpuSlot) -> dict[str, float]:
    lease = str(uuid.uuid4())
    started = time.monotonic()
    grant = backend.grant(GrantRequest(lease, ACCOUNT, USER, gpu.node, (gpu,), 3600))
    granted = time.monotonic()
    step = cluster.run(
        ["srun", f"--jobid={grant.handle}", "--overlap", "true"], user=USER, host=None, timeout=60
    )
    if step.returncode != 0:
        raise RuntimeError(f"a step in grant {grant.handle} failed: {step.stderr}")
    return {"lease": lease, "grant_s": granted - started, "step_s": time.monotonic() - started}


def pass_round(cluster, backend, gpus) -> dict[str, list[float]]:
    """What one placement pass does: every grant submitted, then all awaited together
    (SlurmBackend.grant_many); each lease's first step then runs as soon as its grant is held."""
    requests = [GrantRequest(str(uuid.uuid4()), ACCOUNT, USER, g.node, (g,), 3600) for g in gpus]
    started = time.monotonic()
    outcomes = backend.grant_many(requests)
    held_s = time.monotonic() - started
    if any(isinstance(o, Exception) for o in outcomes):
        raise RuntimeError(f"a grant failed: {outcomes}")

    def step(grant) -> float:
        done = cluster.run(["srun", f"--jobid={grant.handle}", "--overlap", "true"], user=USER,
                           host=None, timeout=60)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"a step in grant {grant.handle} failed: {done.stderr}")
        return time.monotonic() - started

    with ThreadPoolExecutor(len(outcomes)) as pool:
        steps = list(pool.map(step, outcomes))
    revoked = [revoke(cluster, backend, r.lease) for r in requests]
    return {"grant_s": [held_s], "step_s": steps, "revoke_s": revoked}


def revoke(cluster: LocalCluster, backend: SlurmBackend, lease: str) -> float:
    started = time.monotonic()
    backend.revoke(lease)
    return time.monotonic() - started


def round_of(cluster, backend, gpus, workers: int) -> dict[str, list[float]]:
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda g: one_lease(cluster, backend, g), gpus))
    # a step runs inside every grant while it is revoked
    sleepers = [
        subprocess.Popen(
            [
                "runuser",
                "-u",
                USER,
                "--",
                "srun",
                f"--jobid={g.handle}",
                "--overlap",
                "sleep",
                "600",
            ],
            env=cluster.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for g in backend.grants()
    ]
    time.sleep(2)
    with ThreadPoolExecutor(workers) as pool:
        revoked = list(pool.map(lambda d: revoke(cluster, backend, d["lease"]), done))
    for p in sleepers:
        p.wait(timeout=30)
    return {
        "grant_s": [d["grant_s"] for d in done],
        "step_s": [d["step_s"] for d in done],
        "revoke_s": revoked,
    }


def report(title: str, figures: dict[str, list[float]]) -> None:
    parts = [
        f"{name} p50 {statistics.median(v):.2f} p99 {pct(v, 0.99):.2f} max {max(v):.2f}"
        for name, v in figures.items()
    ]
    print(f"{title}: " + "; ".join(parts), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-serial", action="store_true", help="leave out one-at-a-time")
    args = parser.parse_args()
    gpus = slots(args.nodes, args.gpus_per_node)[: args.concurrency]
    nodes = [
        LocalNode(
            f"bench-{n}",
            "127.0.0.1",
            tuple(
                LocalGpu(i, slurm_conf.slot_type(GpuSlot("x", f"bench-{n}", i, GENERATION)))
                for i in range(args.gpus_per_node)
            ),
        )
        for n in range(args.nodes)
    ]
    ensure_unix_user(USER)
    try:
        with LocalCluster(nodes) as cluster:
            backend = SlurmBackend(conf=cluster.conf)
            backend.ensure_account(ACCOUNT, [USER])
            ctld = int(cluster.run(["pgrep", "-f", "slurmctld -D"], host=None).stdout.split()[0])
            cpu0, ctld0, wall0 = time.process_time(), cpu_s(ctld), time.monotonic()
            total = 0
            for r in range(args.rounds):
                report(
                    f"round {r + 1}, {len(gpus)} at once",
                    round_of(cluster, backend, gpus, len(gpus)),
                )
                total += len(gpus)
            if not args.no_serial:
                report(f"one at a time, {len(gpus)}", round_of(cluster, backend, gpus, 1))
                total += len(gpus)
            report(
                f"one placement pass of {len(gpus)} (grant_many)",
                pass_round(cluster, backend, gpus),
            )
            total += len(gpus)
            wall = time.monotonic() - wall0
            print(
                f"{total} grants and revocations in {wall:.0f} s: slurmctld "
                f"{cpu_s(ctld) - ctld0:.1f} CPU s, this process {time.process_time() - cpu0:.1f} "
                f"CPU s (the Slurm commands it ran are separate processes, not counted)"
            )
    finally:
        remove_unix_user(USER)


if __name__ == "__main__":
    main()
