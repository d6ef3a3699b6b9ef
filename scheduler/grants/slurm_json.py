"""Slurm 22.05's answers, read: `squeue`, `sinfo` and `sacct --json`, untrusted input parsed
field by field. Each field used is checked for its type and shape; anything else is a
ClusterError (`cluster.garbage`) that names what was wrong, never a guess. An answer
carrying "errors" (22.05 exits 0 with empty lists when slurmctld cannot be reached) is
`cluster.unavailable`, not an empty cluster.

The grant's job name is part of this format: `wattlease.<lease>.<node>` (`grant_name`);
`grant_of` reads it back. Pure functions, no processes: the mutation sample
(tests/mutation_sample.py) runs tests/scheduler/test_grants_parsing.py against them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from scheduler.grants import slurm_conf
from scheduler.grants.interface import ClusterError, ClusterJob, Grant, NodeGate

GRANT_PREFIX = "wattlease"
LEASE_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
NAME_RE = re.compile(rf"^{GRANT_PREFIX}\.([A-Za-z0-9-]{{1,64}})\.([A-Za-z][A-Za-z0-9-]{{0,62}})$")
GRES_DETAIL_RE = re.compile(r"^gpu:([a-z0-9_]+):(\d+)\(IDX:([0-9,\-]+|N/A)\)$")
# a grant that is gone: its processes are stopped (COMPLETING still runs the epilog only
# after the job's processes were signalled; it counts as alive until it ends)
ALIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "RESIZING"})
HELD = frozenset({"RUNNING", "CONFIGURING"})


def grant_name(lease: str, node: str) -> str:
    """The job name of a lease's grant on a node: what `grant_of` recognises as ours."""
    if not LEASE_RE.match(lease):
        raise ValueError(f"lease id {lease!r} is not [A-Za-z0-9-]{{1,64}}")
    return f"{GRANT_PREFIX}.{lease}.{slurm_conf.check_node_name(node)}"


def grants_of(data: dict[str, Any]) -> list[Grant]:
    """squeue --json: every job that is a Wattlease grant (other jobs are not ours)."""
    return [grant for job in list_of(data, "jobs") if (grant := grant_of(job)) is not None]


def cluster_jobs(data: dict[str, Any]) -> list[ClusterJob]:
    """sacct --json: the steps run inside the grants asked for."""
    out: list[ClusterJob] = []
    for job in list_of(data, "jobs"):
        out += steps_of(job)
    return out


def node_gates(data: dict[str, Any]) -> dict[str, NodeGate]:
    """sinfo --json: every node, by name, as a gate (drained, reason, registered)."""
    gates = {}
    for entry in list_of(data, "nodes"):
        if not isinstance(entry, dict):
            raise ClusterError("sinfo --json: a node that is not an object", code="cluster.garbage")
        name = _text(entry, "name", "sinfo")
        state = _text(entry, "state", "sinfo")
        flags = entry.get("state_flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ClusterError(
                f"sinfo --json: node {name}'s state_flags are not a list of text",
                code="cluster.garbage",
            )
        reason = entry.get("reason") or ""
        if not isinstance(reason, str):
            raise ClusterError(
                f"sinfo --json: node {name}'s reason is not text", code="cluster.garbage"
            )
        drained = "DRAIN" in flags or state.lower() in ("drained", "draining")
        started = entry.get("slurmd_start_time", 0)
        if not isinstance(started, int) or isinstance(started, bool):
            raise ClusterError(
                f"sinfo --json: node {name}'s slurmd_start_time is not a number",
                code="cluster.garbage",
            )
        gates[name] = NodeGate(
            node=name, state=state.lower(), drained=drained, reason=reason,
            registered=started > 0,
        )  # fmt: skip
    return gates


def refuse_errors(data: dict[str, Any], command: str) -> None:
    """22.05's `--json` exits 0 when it could not reach slurmctld, with an empty list and
    the failure in "errors": read as an answer, a controller that is down would hold no
    grants and no nodes (drift repair would grant every lease again)."""
    errors = data.get("errors", [])
    if not isinstance(errors, list):
        raise ClusterError(f"{command} --json: 'errors' is not a list", code="cluster.garbage")
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {}
        said = first.get("description") or first.get("error") or "no description"
        raise ClusterError(
            f"{command} --json could not ask slurmctld: {str(said)[:120]} "
            f"({len(errors)} error(s)); is slurmctld running and reachable?"
        )


def list_of(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise ClusterError(f"Slurm's JSON has no list {key!r}", code="cluster.garbage")
    return value


def _text(entry: dict[str, Any], key: str, what: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise ClusterError(
            f"{what} --json: {key!r} is not text ({value!r:.40})", code="cluster.garbage"
        )
    return value


def _int(entry: dict[str, Any], key: str, what: str) -> int:
    value = entry.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ClusterError(
            f"{what} --json: {key!r} is not a whole number ({value!r:.40})", code="cluster.garbage"
        )
    return value


def grant_of(job: Any) -> Grant | None:
    """A squeue entry as a grant, or None for a job that is not one of ours."""
    if not isinstance(job, dict):
        raise ClusterError("squeue --json: a job that is not an object", code="cluster.garbage")
    name = job.get("name")
    named = NAME_RE.match(name) if isinstance(name, str) else None
    if named is None:
        return None
    state = _text(job, "job_state", "squeue")
    slots = _slots(job)
    return Grant(
        lease=named.group(1),
        handle=str(_int(job, "job_id", "squeue")),
        account=_text(job, "account", "squeue"),
        user=_user_of(job),
        node=named.group(2),
        slots=slots,
        running=state in HELD and bool(slots),
        state=state,
        submitted=_int(job, "submit_time", "squeue"),
    )


def _user_of(job: dict[str, Any]) -> str:
    """The grant's cluster user; a user removed from the machine since (Slurm answers a null
    name) reads as its uid, so the grant stays visible to reconcile and can be released
    instead of making every squeue unreadable."""
    if job.get("user_name") is None and isinstance(job.get("user_id"), int):
        return f"uid:{_int(job, 'user_id', 'squeue')}"
    return _text(job, "user_name", "squeue")


def _slots(job: dict[str, Any]) -> tuple[int, ...]:
    """The device indexes the job holds (gres_detail, once it runs), else those it asks for."""
    detail = job.get("gres_detail") or []
    if not isinstance(detail, list) or not all(isinstance(d, str) for d in detail):
        raise ClusterError(
            "squeue --json: gres_detail is not a list of text", code="cluster.garbage"
        )
    indexes: list[int] = []
    for part in ",".join(detail).replace("),", ")\n").splitlines():
        found = GRES_DETAIL_RE.match(part.strip())
        if found is None:
            raise ClusterError(
                f"squeue --json: GRES {part!r:.60} does not parse", code="cluster.garbage"
            )
        if found.group(3) != "N/A" and int(found.group(2)) > 0:
            indexes += list(_index_list(found.group(3)))
    if indexes:
        return tuple(sorted(indexes))
    asked = job.get("tres_per_node") or ""
    if not isinstance(asked, str):
        raise ClusterError("squeue --json: tres_per_node is not text", code="cluster.garbage")
    wanted = []
    for item in filter(None, asked.split(",")):
        fields = item.removeprefix("gres:").split(":")
        if len(fields) != 3 or fields[0] != slurm_conf.GRES_NAME:
            raise ClusterError(
                f"squeue --json: asked GRES {item!r:.60} is not a GPU slot", code="cluster.garbage"
            )
        try:
            wanted.append(slurm_conf.slot_index(fields[1]))
        except ValueError as exc:
            raise ClusterError(f"squeue --json: {exc}", code="cluster.garbage") from None
    return tuple(sorted(wanted))


def _index_list(text: str) -> Iterable[int]:
    for part in text.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ClusterError(
                f"squeue --json: GRES index list {text!r:.60} does not parse",
                code="cluster.garbage",
            )
        yield from range(int(low), int(high or low) + 1)


def steps_of(job: Any) -> list[ClusterJob]:
    """The steps a user ran inside one grant (sacct --json), each with its GPUs and GPU-s."""
    if not isinstance(job, dict):
        raise ClusterError("sacct --json: a job that is not an object", code="cluster.garbage")
    job_id = _int(job, "job_id", "sacct")
    user = _text(job, "user", "sacct")
    account = _text(job, "account", "sacct")
    steps = job.get("steps", [])
    if not isinstance(steps, list):
        raise ClusterError("sacct --json: steps is not a list", code="cluster.garbage")
    out = []
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("step"), dict):
            raise ClusterError("sacct --json: a step that is not an object", code="cluster.garbage")
        step_id = step["step"].get("id")
        if step_id in ("batch", "extern") or not isinstance(step_id, (int, str)):
            continue  # the grant's own sleep, Slurm's bookkeeping
        times = step.get("time")
        if not isinstance(times, dict):
            raise ClusterError("sacct --json: a step without times", code="cluster.garbage")
        start, end = _int(times, "start", "sacct"), _int(times, "end", "sacct")
        elapsed = _int(times, "elapsed", "sacct")
        gpus = _gpu_count(step)
        state = step.get("state")
        out.append(
            ClusterJob(
                job_id=f"{job_id}.{step_id}",
                user=user,
                account=account,
                state=state if isinstance(state, str) else "UNKNOWN",
                start=start or None,
                end=end or None,
                gpus=gpus,
                gpu_seconds=gpus * max(0, elapsed),
            )
        )
    return out


def _gpu_count(step: dict[str, Any]) -> int:
    tres = step.get("tres")
    allocated = tres.get("allocated") if isinstance(tres, dict) else None
    if not isinstance(allocated, list):
        raise ClusterError("sacct --json: a step without allocated TRES", code="cluster.garbage")
    for item in allocated:
        if isinstance(item, dict) and item.get("type") == "gres" and item.get("name") == "gpu":
            count = item.get("count")
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                return count
            raise ClusterError(
                "sacct --json: a GPU count that is not a number", code="cluster.garbage"
            )
    return 0
