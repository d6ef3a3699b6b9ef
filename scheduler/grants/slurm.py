"""The grant interface on Slurm (22.05): a lease's grant is an allocation job.

On each node a lease uses, Wattlease submits (as root or SlurmUser, `sbatch --uid`) a job
owned by the lease's cluster user, in the tenant's account, that holds exactly the lease's
GPU slots (`--gres=gpu:<generation>_<index>:1,…`, scheduler/grants/slurm_conf.py) and runs
nothing but `sleep`. The tenant runs its work as steps inside it (`srun --jobid=<grant>
--overlap …`): the cgroup gives each step exactly the grant's devices, Slurm lets no other
user start a step there, and the holder cannot raise the job's time limit. Revocation is
`scancel`: the grant and every step in it stop within KillWait. Why a job and not a
reservation: Slurm 22.05 reserves cores and nodes, not particular GRES, so a reservation
could not say which GPUs of a node are the lease's (docs/operations.md, "The grant").

Every answer is untrusted: squeue, sinfo and sacct are read as JSON (`--json`) by
scheduler/grants/slurm_json.py, each field used checked for its type; anything else is a
ClusterError that names what was wrong. This module runs the commands."""

from __future__ import annotations

import grp
import json
import math
import os
import pwd
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scheduler.grants import slurm_conf, slurm_json
from scheduler.grants.interface import (
    CLUSTER_COMMAND_TIMEOUT_S,
    GRANT_START_TIMEOUT_S,
    REVOKE_BOUND_S,
    ClusterError,
    ClusterJob,
    Grant,
    GrantRefused,
    GrantRequest,
    NodeGate,
)

POLL_S = 0.1  # the first wait for Slurm to act; then half as long again each time, to
POLL_MAX_S = 0.5  # at most this: each poll is an squeue of every job (seconds of CPU a run)
SUBMIT_THREADS = 8  # sbatch calls in flight at once when a pass grants many leases
SECONDS_PER_MINUTE = 60
ACCOUNT_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
MAX_REASON_CHARS = 200
# what Slurm's clients say when slurmctld cannot be reached (down, restarting, partitioned)
UNREACHABLE_RE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|"
    r"Connection refused|Communication connection failure"
)


def check_account(account: str) -> str:
    if not ACCOUNT_RE.match(account):
        raise GrantRefused(f"account {account!r} is not a Slurm account name ([a-z][a-z0-9_-]*)")
    return account


def check_user(user: str) -> str:
    if not USER_RE.match(user):
        raise GrantRefused(f"cluster user {user!r} is not a user name ([a-z_][a-z0-9_-]*)")
    return user


class SlurmBackend:
    """Grants on one Slurm cluster, driven through its own commands (`SLURM_CONF` names the
    cluster; `bin_dir` where sbatch & co. are, else PATH)."""

    name = "slurm"

    def __init__(
        self,
        *,
        conf: str | Path | None = None,
        partition: str = "gpu",
        bin_dir: str | Path | None = None,
        timeout_s: float = CLUSTER_COMMAND_TIMEOUT_S,
        start_timeout_s: float = GRANT_START_TIMEOUT_S,
        revoke_bound_s: float = REVOKE_BOUND_S,
        netns: str | None = None,
    ) -> None:
        self.conf = Path(conf) if conf else None
        self.partition = partition
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.revoke_bound_s = revoke_bound_s
        # commands run inside this network namespace (the tests' separate hosts)
        self.netns = netns

    # --- running Slurm's commands ------------------------------------------------------

    def _argv(self, command: str, args: Sequence[str]) -> list[str]:
        exe = str(self.bin_dir / command) if self.bin_dir else command
        # nsenter, not `ip netns exec` (which remounts /sys): a test host's network only
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []
        return [*prefix, exe, *args]

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ}
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        try:
            return subprocess.run(
                self._argv(command, args),
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=env,
                check=False,
            )
        except FileNotFoundError:
            raise ClusterError(
                f"Slurm's {command} is not installed here: install slurm-client (`make setup`) "
                "or set SLURM_BIN_DIR",
                code="cluster.not_installed",
            ) from None
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"{command} did not answer within {self.timeout_s:.0f} s: is slurmctld up?",
                code="cluster.timeout",
            ) from None

    def _ok(self, command: str, *args: str) -> str:
        done = self.run(command, *args)
        if done.returncode != 0:
            raise ClusterError(
                f"{command} {' '.join(args[:3])}… failed (exit {done.returncode}): "
                f"{_first_line(done.stderr)}"
            )
        return done.stdout

    def _json(self, command: str, *args: str) -> dict[str, Any]:
        out = self._ok(command, *args, "--json")
        try:
            data = json.loads(out)
        except ValueError:
            raise ClusterError(
                f"{command} --json answered text that is not JSON: {out[:80]!r}",
                code="cluster.garbage",
            ) from None
        if not isinstance(data, dict):
            raise ClusterError(
                f"{command} --json answered a {type(data).__name__}", code="cluster.garbage"
            )
        slurm_json.refuse_errors(data, command)
        return data

    # --- accounts -------------------------------------------------------------------------

    def ensure_account(self, account: str, users: Sequence[str]) -> None:
        check_account(account)
        for user in users:
            check_user(user)
        have = self._ok("sacctmgr", "-n", "-P", "show", "account", account, "format=Account")
        if account not in have.split():
            self._ok("sacctmgr", "-i", "add", "account", account, "Organization=wattlease",
                     f"Description=wattlease tenant {account}")  # fmt: skip
        listed = self._ok("sacctmgr", "-n", "-P", "show", "assoc", f"account={account}",
                          "format=User")  # fmt: skip
        present = {u for u in listed.split() if u}
        for user in users:
            if user not in present:
                self._ok("sacctmgr", "-i", "add", "user", user, f"account={account}")

    # --- grants ------------------------------------------------------------------------------

    def grant(self, request: GrantRequest) -> Grant:
        [outcome] = self.grant_many([request])
        if isinstance(outcome, ClusterError):
            raise outcome
        return outcome

    def grant_many(self, requests: Sequence[GrantRequest]) -> list[Grant | ClusterError]:
        """Submit every grant first, then wait for them together: Slurm starts the ones
        submitted before a scheduling cycle in that cycle, so n grants cost about one cycle
        (bench/grant_bench.py), not n."""
        existing: dict[tuple[str, str], list[Grant]] = {}
        for held in self.grants():  # one look for every retried grant, not one per request
            existing.setdefault((held.lease, held.node), []).append(held)

        def submit(request: GrantRequest) -> Grant | str | ClusterError:
            try:
                return self._submit(request, existing.get((request.lease, request.node), []))
            except ClusterError as exc:
                return exc

        with ThreadPoolExecutor(min(SUBMIT_THREADS, max(1, len(requests)))) as pool:
            submitted = list(pool.map(submit, requests))
        waiting = {
            step: request for request, step in zip(requests, submitted, strict=True)
            if isinstance(step, str)
        }  # fmt: skip
        awaited = self._await_held(waiting)
        out: list[Grant | ClusterError] = []
        for step in submitted:
            out.append(awaited[step] if isinstance(step, str) else step)
        return out

    def _submit(self, request: GrantRequest, held_before: list[Grant]) -> Grant | str:
        """The grant already held (a retried call), or the job id of the one submitted."""
        name = slurm_json.grant_name(request.lease, request.node)
        account, user = check_account(request.account), check_user(request.user)
        wanted = tuple(g.index for g in request.gpus)
        for held in held_before:
            if held.running and held.slots == wanted:
                return held  # granted before (a retried call): the same grant
            self._cancel([held.handle])
        gid = _group_of(user)
        done = self.run(
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--comment=wattlease lease {request.lease}",
            f"--account={account}",
            f"--uid={user}",
            f"--gid={gid}",
            f"--partition={self.partition}",
            f"--nodelist={request.node}",
            "--nodes=1",
            "--ntasks=1",
            f"--gres={slurm_conf.gres_request(request.gpus)}",
            f"--time={max(1, math.ceil(request.limit_s / SECONDS_PER_MINUTE))}",
            "--no-requeue",
            "--chdir=/",
            "--output=/dev/null",
            "--error=/dev/null",
            "--wrap=exec sleep infinity",
        )
        if done.returncode != 0:
            why = _first_line(done.stderr)
            if UNREACHABLE_RE.search(done.stderr):  # not a refusal: ask again later
                raise ClusterError(f"sbatch could not reach slurmctld: {why}")
            raise GrantRefused(f"Slurm refused the grant on {request.node}: {why}")
        handle = done.stdout.strip().split(";")[0]
        if not handle.isdigit():
            raise ClusterError(
                f"sbatch answered {done.stdout[:80]!r}, not a job id", code="cluster.garbage"
            )
        return handle

    def _await_held(self, waiting: dict[str, GrantRequest]) -> dict[str, Grant | ClusterError]:
        """Each submitted job (by id) once Slurm holds exactly its GPUs, or why not: one
        squeue a poll for all of them."""
        out: dict[str, Grant | ClusterError] = {}
        deadline = time.monotonic() + self.start_timeout_s
        reasons: dict[str, str] = {}
        pause = _pauses()
        while waiting and time.monotonic() < deadline:
            jobs = {g.handle: g for g in self._squeue()}
            for handle, request in list(waiting.items()):
                grant = jobs.get(handle)
                wanted = tuple(g.index for g in request.gpus)
                if grant is not None and grant.running:
                    if grant.slots == wanted:
                        out[handle] = grant
                    else:
                        self._cancel([handle])
                        out[handle] = ClusterError(
                            f"Slurm gave job {handle} GPUs {list(grant.slots)}, not {list(wanted)}",
                            code="cluster.wrong_gpus",
                        )
                elif grant is None or grant.state not in slurm_json.ALIVE:
                    state = grant.state if grant else "gone"
                    out[handle] = GrantRefused(
                        f"Slurm's job {handle} for the grant ended before it started ({state})"
                    )
                else:
                    reasons[handle] = grant.state
                    continue
                del waiting[handle]
            if waiting:
                time.sleep(next(pause))
        for handle, request in waiting.items():
            reason = self._pending_reason(handle) or reasons.get(handle, "not started")
            self._cancel([handle])
            out[handle] = GrantRefused(
                f"Slurm did not start the grant on {request.node} within "
                f"{self.start_timeout_s:.0f} s ({reason}): its GPUs are held by something else"
            )
        return out

    def _pending_reason(self, handle: str) -> str:
        data = self._json("squeue")
        for job in slurm_json.list_of(data, "jobs"):
            if not isinstance(job, dict) or str(job.get("job_id")) != handle:
                continue
            if isinstance(job.get("state_reason"), str):
                return str(job["state_reason"])
        return ""

    def revoke(self, lease: str) -> list[str]:
        return self.revoke_many([lease])[lease]

    def revoke_many(self, leases: Sequence[str]) -> dict[str, list[str]]:
        """One squeue to find the grants, one scancel for all, one squeue a poll until they
        are gone: a pass that ends 20 leases costs what ending one does."""
        revoked: dict[str, list[str]] = {lease: [] for lease in leases}
        for grant in self.grants():
            if grant.lease in revoked:
                revoked[grant.lease].append(grant.handle)
        handles = [h for held in revoked.values() for h in held]
        if handles:
            self._cancel(handles)
        return revoked

    def release(self, handles: Sequence[str]) -> None:
        if not all(h.isdigit() for h in handles):
            raise ValueError(f"grant handles must be Slurm job ids: {list(handles)}")
        if handles:
            self._cancel(handles)

    def _cancel(self, handles: Sequence[str]) -> None:
        self._ok("scancel", *handles)
        deadline = time.monotonic() + self.revoke_bound_s
        pause = _pauses()
        while time.monotonic() < deadline:
            alive = [
                g for g in self._squeue() if g.handle in handles and g.state in slurm_json.ALIVE
            ]
            if not alive:
                return
            time.sleep(next(pause))
        states_left = sorted({g.state for g in alive})
        raise ClusterError(
            f"Slurm jobs {', '.join(g.handle for g in alive)} still {'/'.join(states_left)} "
            f"{self.revoke_bound_s:.0f} s after scancel",
            code="cluster.revoke_timeout",
        )

    def grants(self) -> list[Grant]:
        return [g for g in self._squeue() if g.state in slurm_json.ALIVE]

    def _squeue(self) -> list[Grant]:
        # every job: squeue --json of Slurm 22.05 answers all jobs whatever filter it is
        # given (--jobs, --states), so the callers pick theirs
        return slurm_json.grants_of(self._json("squeue"))

    # --- nodes -----------------------------------------------------------------------------

    def drain(self, node: str, reason: str) -> None:
        slurm_conf.check_node_name(node)
        reason = " ".join(reason.split())[:MAX_REASON_CHARS] or "drained by wattlease"
        self._ok("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        slurm_conf.check_node_name(node)
        gate = self.nodes().get(node)
        if gate is None:
            raise ClusterError(f"Slurm has no node {node}", code="cluster.no_node")
        if gate.drained:
            self._ok("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def nodes(self) -> dict[str, NodeGate]:
        return slurm_json.node_gates(self._json("sinfo"))

    # --- accounting ----------------------------------------------------------------------------

    def jobs(self, handles: Sequence[str]) -> list[ClusterJob]:
        if not handles:
            return []
        if not all(h.isdigit() for h in handles):
            raise ValueError(f"grant handles must be Slurm job ids: {list(handles)}")
        return slurm_json.cluster_jobs(self._json("sacct", "--jobs", ",".join(handles)))

    def submit_hint(self, grant: Grant) -> str:
        return f"srun --jobid={grant.handle} --overlap <command>   # as cluster user {grant.user}"


def _pauses() -> Iterator[float]:
    """The waits between polls of Slurm: POLL_S, growing by half to POLL_MAX_S."""
    pause = POLL_S
    while True:
        yield pause
        pause = min(pause * 1.5, POLL_MAX_S)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no message)"


def _group_of(user: str) -> str:
    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError:
        raise GrantRefused(
            f"cluster user {user!r} is not a user on this host: the operator adds it (LDAP or "
            "useradd) before a lease is granted to it",
            code="cluster.unknown_user",
        ) from None
