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
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.grants.interface import GpuSlot, GrantRequest
from scheduler.grants.local_cluster import (
    LocalCluster,
    LocalNode,
    ensure_unix_user,
    remove_unix_user,
)
from scheduler.grants.slurm import SlurmBackend

# the bench's unix user is its own: a test run beside it must not remove it
USER, ACCOUNT, GENERATION = f"wlt-bench-{os.getpid():x}", "bench", "A100-SXM4-80GB"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PASS_S = 5.0  # the lease worker's interval (LEASE_WORKER_INTERVAL_S)


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

    def step(grant) -> tuple[float, float]:
        began = time.monotonic()
        done = cluster.run(["srun", f"--jobid={grant.handle}", "--overlap", "true"], user=USER,
                           host=None, timeout=60)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"a step in grant {grant.handle} failed: {done.stderr}")
        return time.monotonic() - started, time.monotonic() - began

    with ThreadPoolExecutor(len(outcomes)) as pool:
        steps = list(pool.map(step, outcomes))
    revoked = [revoke(cluster, backend, r.lease) for r in requests]
    return {
        "grant_s": [held_s],
        "step_s": [total for total, _ in steps],
        "srun_s": [own for _, own in steps],
        "revoke_s": revoked,
    }


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


def sustained(cluster, backend, gpus, leases: int, minutes: float, seed: int) -> None:
    """`leases` one-GPU leases arriving evenly over `minutes`, each held 15 to 45 s
    (about 55 at once), driven the way the lease worker drives them: one pass every
    PASS_S that revokes the leases that ended (one `revoke_many`), grants the arrivals
    (one `grant_many`) and reads what Slurm holds (one `grants`, as the drift repair
    does). Every tenth lease runs a step. At the end: every lease was granted once and
    revoked, Slurm holds nothing, no GPU was ever in two grants, and accounting has
    every grant."""
    rng = random.Random(seed)
    span_s = minutes * 60
    arrivals = sorted(rng.uniform(0, span_s - 60) for _ in range(leases))
    waiting = [(at, rng.uniform(15, 45)) for at in arrivals]
    free, held, handles, failures, overlaps = list(gpus), {}, [], [], 0
    grant_s, revoke_s, queued_s, steps = [], [], [], 0
    started = time.monotonic()
    passes = 0
    while waiting or held:
        now = time.monotonic() - started
        ended = [lease for lease, (_, ends) in held.items() if ends <= now]
        if ended:
            began = time.monotonic()
            backend.revoke_many(ended)
            revoke_s.append(time.monotonic() - began)
            for lease in ended:
                free.append(held.pop(lease)[0])
        due = []
        while waiting and waiting[0][0] <= now and free:
            at, lifetime = waiting.pop(0)
            due.append((at, lifetime, free.pop(0)))
        if due:
            requests = [
                GrantRequest(str(uuid.uuid4()), ACCOUNT, USER, g.node, (g,), 3600)
                for _, _, g in due
            ]
            began = time.monotonic()
            outcomes = backend.grant_many(requests)
            grant_s.append(time.monotonic() - began)
            for (at, lifetime, gpu), request, outcome in zip(due, requests, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    failures.append(f"{request.lease}: {outcome}")
                    free.append(gpu)
                    continue
                queued_s.append(time.monotonic() - started - at)
                held[request.lease] = (gpu, time.monotonic() - started + lifetime)
                handles.append(outcome.handle)
                if len(handles) % 10 == 0:
                    step = cluster.run(["srun", f"--jobid={outcome.handle}", "--overlap", "true"],
                                       user=USER, host=None, timeout=60)  # fmt: skip
                    if step.returncode != 0:
                        failures.append(f"step in {outcome.handle}: {step.stderr.strip()}")
                    steps += 1
        holding = [(g.node, i) for g in backend.grants() for i in g.slots]
        overlaps += len(holding) - len(set(holding))
        passes += 1
        if passes % 12 == 0:
            print(f"  {now:.0f} s: {len(handles)} granted, {len(held)} held, "
                  f"{len(waiting)} to come", flush=True)  # fmt: skip
        time.sleep(max(0.0, PASS_S - (time.monotonic() - started - now)))
    left = backend.grants()
    accounting = backend.run("sacct", "--jobs", ",".join(handles), "-X", "-n", "-P",
                             "--format=JobID,State").stdout.split()  # fmt: skip
    accounted = {line.split("|")[0] for line in accounting if "|CANCELLED" in line}
    report(f"{leases} leases over {minutes:g} min, a pass every {PASS_S:g} s", {
        "pass grant_many_s": grant_s, "arrival to held_s": queued_s, "pass revoke_many_s": revoke_s,
    })  # fmt: skip
    print(f"granted {len(handles)}, steps {steps}, failures {len(failures)}, grants left "
          f"{len(left)}, GPU held twice {overlaps}, missing from accounting (or not cancelled) "
          f"{len(set(handles) - accounted)}")  # fmt: skip
    for failure in failures[:5]:
        print("  failure:", failure)
    if failures or left or overlaps or set(handles) - accounted or len(handles) != leases:
        raise SystemExit("the sustained run lost or double-granted something (above)")


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
    parser.add_argument(
        "--slurm-conf",
        default="",
        help="lines appended to slurm.conf, e.g. 'SchedulerParameters=batch_sched_delay=0'",
    )
    parser.add_argument(
        "--sustained",
        type=int,
        default=0,
        metavar="LEASES",
        help="instead: LEASES leases granted and revoked over --minutes",
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    gpus = slots(args.nodes, args.gpus_per_node)[: args.concurrency]
    nodes = [
        LocalNode(
            f"bench-{n}",
            "127.0.0.1",
            tuple(GpuSlot("x", f"bench-{n}", i, GENERATION) for i in range(args.gpus_per_node)),
        )
        for n in range(args.nodes)
    ]
    ensure_unix_user(USER)
    try:
        with LocalCluster(nodes, extra_conf=args.slurm_conf.replace("\\n", "\n") + "\n") as cluster:
            backend = SlurmBackend(conf=cluster.conf)
            backend.ensure_account(ACCOUNT, [USER])
            ctld = int(cluster.run(["pgrep", "-f", "slurmctld -D"], host=None).stdout.split()[0])
            cpu0, ctld0, wall0 = time.process_time(), cpu_s(ctld), time.monotonic()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            child0 = usage.ru_utime + usage.ru_stime
            total = 0
            if args.sustained:
                sustained(cluster, backend, slots(args.nodes, args.gpus_per_node),
                          args.sustained, args.minutes, args.seed)  # fmt: skip
                total, args.rounds, args.no_serial, args.concurrency = args.sustained, 0, True, 0
            for r in range(args.rounds):
                report(
                    f"round {r + 1}, {len(gpus)} at once",
                    round_of(cluster, backend, gpus, len(gpus)),
                )
                total += len(gpus)
            if not args.no_serial:
                report(f"one at a time, {len(gpus)}", round_of(cluster, backend, gpus, 1))
                total += len(gpus)
            if gpus and not args.sustained:
                report(
                    f"one placement pass of {len(gpus)} (grant_many)",
                    pass_round(cluster, backend, gpus),
                )
                total += len(gpus)
            wall = time.monotonic() - wall0
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(
                f"{total} grants and revocations in {wall:.0f} s: slurmctld "
                f"{cpu_s(ctld) - ctld0:.1f} CPU s, this process {time.process_time() - cpu0:.1f} "
                f"CPU s, the Slurm commands it ran (sbatch, squeue, scancel, srun, ...) "
                f"{children.ru_utime + children.ru_stime - child0:.1f} CPU s"
            )
    finally:
        remove_unix_user(USER)


if __name__ == "__main__":
    main()
