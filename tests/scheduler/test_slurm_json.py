"""Slurm's answers as scheduler/grants/slurm_json.py reads them, field by field: what each
answer means for a grant, a node gate and a lease's jobs, and which answers are refused.
The mutation sample (tests/mutation_sample.py) runs these against every mutant of the
module: each check here is one that must bite."""

from __future__ import annotations

import pytest

from scheduler.grants import slurm_json
from scheduler.grants.interface import ClusterError
from tests.scheduler.test_grants_parsing import LEASE, squeue_job


def sinfo_node(**changes) -> dict:
    node = {
        "name": "n1",
        "state": "IDLE",
        "state_flags": [],
        "reason": "",
        "slurmd_start_time": 1_700_000_000,
    }
    node.update(changes)
    return node


def sacct_step(step_id, gpus: int | None, elapsed: int, state="COMPLETED", start=100) -> dict:
    allocated = [{"type": "cpu", "name": None, "count": 1}]
    if gpus is not None:
        allocated.append({"type": "gres", "name": "gpu", "count": gpus})
    return {
        "step": {"id": step_id},
        "state": state,
        "time": {"start": start, "end": start + elapsed if start else 0, "elapsed": elapsed},
        "tres": {"allocated": allocated},
    }


# each reader's errors name the command whose answer it read
COMMAND = {"grant_of": "squeue", "grants_of": "squeue", "node_gates": "sinfo",
           "steps_of": "sacct", "cluster_jobs": "sacct", "refuse_errors": "squeue"}  # fmt: skip


def refused(read, *args, match: str, code: str = "cluster.garbage") -> ClusterError:
    with pytest.raises(ClusterError, match=match) as caught:
        read(*args)
    assert caught.value.code == code
    message = str(caught.value)
    assert message.startswith(f"{COMMAND[read.__name__]} --json") or message.startswith(
        "Slurm's JSON has no list"
    ), message
    return caught.value


# --- the grant's name ------------------------------------------------------------------------


def test_a_grant_name_carries_its_lease_and_node_and_reads_back():
    name = slurm_json.grant_name(LEASE, "gpu-7")
    assert name == f"wattlease.{LEASE}.gpu-7"
    grant = slurm_json.grant_of(squeue_job(name=name))
    assert (grant.lease, grant.node) == (LEASE, "gpu-7")


@pytest.mark.parametrize("lease", ["", "a" * 65, "lease.1", "l/1", "l 1"])
def test_a_lease_id_that_would_not_read_back_is_refused(lease):
    with pytest.raises(ValueError, match="lease id"):
        slurm_json.grant_name(lease, "n1")
    assert slurm_json.grant_name("a" * 64, "n1")


def test_only_the_exact_grant_name_is_ours():
    for name in (f"wattlease.{LEASE}", f"xwattlease.{LEASE}.n1", f"wattlease.{LEASE}.n1.x",
                 f"wattlease.{LEASE}.1n", f"Wattlease.{LEASE}.n1", None, 7):  # fmt: skip
        assert slurm_json.grant_of(squeue_job(name=name)) is None, name


# --- squeue ----------------------------------------------------------------------------------


def test_a_running_grant_holds_the_devices_slurm_allocated():
    grant = slurm_json.grant_of(squeue_job())
    assert grant.handle == "42" and grant.account == "acme" and grant.user == "alice"
    assert grant.slots == (0, 2) and grant.running and grant.state == "RUNNING"
    assert grant.submitted == 1_700_000_000


def test_index_ranges_and_lists_in_gres_detail_are_every_device_they_name():
    detail = ["gpu:a100_0:1(IDX:0),gpu:a100_3:3(IDX:3-5),gpu:a100_7:1(IDX:7)"]
    assert slurm_json.grant_of(squeue_job(gres_detail=detail)).slots == (0, 3, 4, 5, 7)
    detail = ["gpu:a100_1:2(IDX:1,6)"]
    assert slurm_json.grant_of(squeue_job(gres_detail=detail)).slots == (1, 6)


def test_a_gres_with_no_devices_yet_counts_what_was_asked_for():
    detail = ["gpu:a100_0:0(IDX:N/A)"]
    grant = slurm_json.grant_of(squeue_job(gres_detail=detail))
    assert grant.slots == (0, 2)  # from tres_per_node
    grant = slurm_json.grant_of(squeue_job(gres_detail=["gpu:a100_0:1(IDX:N/A)"]))
    assert grant.slots == (0, 2)


@pytest.mark.parametrize("state", ["RUNNING", "CONFIGURING"])
def test_a_grant_holds_its_gpus_only_while_slurm_runs_it(state):
    assert slurm_json.grant_of(squeue_job(job_state=state)).running


@pytest.mark.parametrize("state", ["PENDING", "COMPLETING", "SUSPENDED", "CANCELLED"])
def test_a_grant_slurm_does_not_run_holds_nothing(state):
    assert not slurm_json.grant_of(squeue_job(job_state=state)).running


def test_a_running_job_with_no_gpus_holds_nothing():
    job = squeue_job(gres_detail=[], tres_per_node="")
    grant = slurm_json.grant_of(job)
    assert grant.slots == () and not grant.running


def test_alive_and_held_are_the_states_slurm_still_runs_processes_in():
    assert {"PENDING", "RUNNING", "COMPLETING", "SUSPENDED"} <= slurm_json.ALIVE
    assert not {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"} & slurm_json.ALIVE
    assert slurm_json.HELD <= slurm_json.ALIVE


@pytest.mark.parametrize(
    ("detail", "match"),
    [
        (["gpu:a100_0:1(IDX:1-)"], "does not parse"),
        (["gpu:a100_0:1(IDX:-1)"], "does not parse"),
        (["gpu:a100_0:1(IDX:1,x)"], "does not parse"),
        (["gpu:a100_0:1(IDX:0)x"], "does not parse"),
        (["mps:a100_0:1(IDX:0)"], "does not parse"),
        ([7], "^squeue --json: gres_detail is not a list of text$"),
    ],
)
def test_gres_detail_that_does_not_parse_is_refused(detail, match):
    refused(slurm_json.grant_of, squeue_job(gres_detail=detail), match=match)


@pytest.mark.parametrize(
    ("asked", "match"),
    [
        (7, "^squeue --json: tres_per_node is not text$"),
        ("gres:mps:a100_0:1", "not a GPU slot"),
        ("gres:gpu:x:1", "slot"),
    ],
)
def test_an_asked_gres_that_is_not_a_slot_is_refused(asked, match):
    refused(slurm_json.grant_of, squeue_job(gres_detail=[], tres_per_node=asked), match=match)


def test_asked_slots_read_with_or_without_the_gres_prefix():
    job = squeue_job(gres_detail=[], tres_per_node="gpu:a100_5:1,gres:gpu:a100_1:1")
    assert slurm_json.grant_of(job).slots == (1, 5)


def test_a_removed_user_reads_as_its_uid_and_a_named_one_as_its_name():
    assert slurm_json.grant_of(squeue_job(user_name=None, user_id=7)).user == "uid:7"
    assert slurm_json.grant_of(squeue_job(user_name="bob", user_id=7)).user == "bob"
    refused(slurm_json.grant_of, squeue_job(user_name=None, user_id=None), match="user_name")


def test_every_grant_of_an_squeue_answer_and_none_of_the_other_jobs():
    answer = {"jobs": [squeue_job(), squeue_job(name="train.sh", job_id=43),
                       squeue_job(job_id=44, name=slurm_json.grant_name(LEASE, "n2"))]}  # fmt: skip
    assert [(g.handle, g.node) for g in slurm_json.grants_of(answer)] == [
        ("42", "n1"),
        ("44", "n2"),
    ]
    assert slurm_json.grants_of({"jobs": []}) == []
    refused(slurm_json.grants_of, {"jobs": {}}, match="no list 'jobs'")
    refused(slurm_json.grants_of, {}, match="no list 'jobs'")


# --- errors in an answer ------------------------------------------------------------------------


def test_an_answer_with_errors_says_slurmctld_could_not_be_asked():
    error = refused(
        slurm_json.refuse_errors,
        {"errors": [{"description": "Unable to contact slurm controller"}, {}], "jobs": []},
        "squeue",
        match="squeue --json could not ask slurmctld",
        code="cluster.unavailable",
    )
    assert "Unable to contact slurm controller" in str(error) and "(2 error(s))" in str(error)
    nothing_said = "slurmctld: no description [(]1 error"
    error = refused(slurm_json.refuse_errors, {"errors": ["x"]}, "squeue",
                    match=nothing_said, code="cluster.unavailable")  # fmt: skip
    long = {"errors": [{"error": "e" * 300}]}
    error = refused(slurm_json.refuse_errors, long, "squeue", match="e{120} [(]1 error",
                    code="cluster.unavailable")  # fmt: skip
    assert "e" * 121 not in str(error)


# --- sinfo -----------------------------------------------------------------------------------


def test_sinfo_nodes_are_gates_by_name():
    gates = slurm_json.node_gates(
        {"nodes": [sinfo_node(), sinfo_node(name="n2", state="MIXED", reason="x")]}
    )
    assert sorted(gates) == ["n1", "n2"]
    assert gates["n1"].state == "idle" and not gates["n1"].drained and gates["n1"].registered
    assert gates["n2"].state == "mixed" and gates["n2"].reason == "x"


@pytest.mark.parametrize(
    ("state", "flags", "drained"),
    [("IDLE", ["DRAIN"], True), ("DRAINED", [], True), ("DRAINING", [], True),
     ("draining", [], True), ("IDLE", ["NOT_RESPONDING"], False), ("DOWN", [], False)],
)  # fmt: skip
def test_a_node_is_drained_by_its_flag_or_its_state(state, flags, drained):
    gate = slurm_json.node_gates({"nodes": [sinfo_node(state=state, state_flags=flags)]})["n1"]
    assert gate.drained is drained


def test_a_node_whose_slurmd_has_not_registered_says_so():
    assert not slurm_json.node_gates({"nodes": [sinfo_node(slurmd_start_time=0)]})["n1"].registered
    node = sinfo_node()
    del node["slurmd_start_time"], node["state_flags"]
    node["reason"] = None
    gate = slurm_json.node_gates({"nodes": [node]})["n1"]
    assert not gate.registered and not gate.drained and gate.reason == ""


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"name": None}, "'name' is not text"),
        ({"state": 3}, "'state' is not text"),
        ({"state_flags": "DRAIN"}, "state_flags"),
        ({"state_flags": [1]}, "state_flags"),
        ({"reason": 5}, "reason is not text"),
        ({"slurmd_start_time": "0"}, "slurmd_start_time"),
        ({"slurmd_start_time": True}, "slurmd_start_time"),
    ],
)
def test_a_sinfo_node_that_does_not_parse_is_refused(changes, match):
    refused(slurm_json.node_gates, {"nodes": [sinfo_node(**changes)]}, match=match)


def test_a_sinfo_answer_without_node_objects_is_refused():
    refused(
        slurm_json.node_gates,
        {"nodes": ["n1"]},
        match="^sinfo --json: a node that is not an object$",
    )
    refused(slurm_json.node_gates, {"nodes": None}, match="no list 'nodes'")


# --- sacct -----------------------------------------------------------------------------------


def test_the_jobs_of_an_sacct_answer_are_every_step_of_every_grant():
    answer = {
        "jobs": [
            {"job_id": 42, "user": "alice", "account": "acme",
             "steps": [sacct_step("extern", 2, 9), sacct_step(0, 2, 30, state="RUNNING")]},
            {"job_id": 43, "user": "bob", "account": "beta", "steps": [sacct_step("1", 1, 5)]},
        ]
    }  # fmt: skip
    jobs = slurm_json.cluster_jobs(answer)
    assert [(j.job_id, j.user, j.account, j.state, j.gpus, j.gpu_seconds) for j in jobs] == [
        ("42.0", "alice", "acme", "RUNNING", 2, 60),
        ("43.1", "bob", "beta", "COMPLETED", 1, 5),
    ]
    assert (jobs[0].start, jobs[0].end) == (100, 130)
    assert slurm_json.cluster_jobs({"jobs": []}) == []


def test_a_step_not_started_has_no_times_and_one_without_gpus_counts_none():
    job = {"job_id": 42, "user": "alice", "account": "acme",
           "steps": [sacct_step(0, None, 0, start=0), sacct_step(1, 0, 9)]}  # fmt: skip
    first, second = slurm_json.steps_of(job)
    assert (first.start, first.end, first.gpus, first.gpu_seconds) == (None, None, 0, 0)
    assert (second.gpus, second.gpu_seconds) == (0, 0)


def test_negative_elapsed_time_bills_no_gpu_seconds_and_a_state_that_is_not_text_is_unknown():
    job = {"job_id": 42, "user": "alice", "account": "acme",
           "steps": [sacct_step(0, 2, -5, state=None)]}  # fmt: skip
    [step] = slurm_json.steps_of(job)
    assert step.gpu_seconds == 0 and step.state == "UNKNOWN"


@pytest.mark.parametrize(
    ("job", "match"),
    [
        ([], "^sacct --json: a job that is not an object$"),
        ({"job_id": "42", "user": "a", "account": "b"}, "job_id"),
        ({"job_id": 42, "user": 1, "account": "b"}, "'user'"),
        ({"job_id": 42, "user": "a", "account": None}, "'account'"),
        ({"job_id": 42, "user": "a", "account": "b", "steps": {}},
         "^sacct --json: steps is not a list$"),
        ({"job_id": 42, "user": "a", "account": "b", "steps": [[]]},
         "^sacct --json: a step that is not an object$"),
        ({"job_id": 42, "user": "a", "account": "b", "steps": [{"step": 1}]}, "step that is not"),
        ({"job_id": 42, "user": "a", "account": "b",
          "steps": [{"step": {"id": 0}, "time": None}]}, "^sacct --json: a step without times$"),
        ({"job_id": 42, "user": "a", "account": "b",
          "steps": [{**sacct_step(0, 1, 5), "tres": {}}]},
         "^sacct --json: a step without allocated TRES$"),
        ({"job_id": 42, "user": "a", "account": "b",
          "steps": [{**sacct_step(0, 1, 5), "tres": []}]}, "allocated TRES"),
    ],
)  # fmt: skip
def test_an_sacct_job_that_does_not_parse_is_refused(job, match):
    refused(slurm_json.steps_of, job, match=match)


@pytest.mark.parametrize("count", [-1, "2", True, None])
def test_a_gpu_count_that_is_not_a_count_is_refused(count):
    step = sacct_step(0, 1, 5)
    step["tres"]["allocated"][1]["count"] = count
    job = {"job_id": 42, "user": "a", "account": "b", "steps": [step]}
    refused(slurm_json.steps_of, job, match="^sacct --json: a GPU count that is not a number$")


def test_a_steps_own_bookkeeping_is_not_a_job_of_the_lease():
    job = {"job_id": 42, "user": "a", "account": "b",
           "steps": [sacct_step("batch", 2, 5), sacct_step("extern", 2, 5),
                     sacct_step(None, 2, 5), sacct_step(0, 2, 5)]}  # fmt: skip
    assert [s.job_id for s in slurm_json.steps_of(job)] == ["42.0"]


def test_a_job_that_is_not_an_object_is_refused_by_squeue_too():
    refused(slurm_json.grant_of, [], match="^squeue --json: a job that is not an object$")


def test_gres_detail_over_several_entries_and_a_gres_holding_no_device():
    detail = ["gpu:a100_0:1(IDX:0)", "gpu:a100_4:1(IDX:4)"]
    assert slurm_json.grant_of(squeue_job(gres_detail=detail)).slots == (0, 4)
    # a count of 0 holds nothing, whatever index it names: the asked slots stand
    assert slurm_json.grant_of(squeue_job(gres_detail=["gpu:a100_0:0(IDX:3)"])).slots == (0, 2)


def test_only_gres_gpu_counts_as_gpus_and_a_job_without_steps_ran_none():
    step = sacct_step(0, 2, 10)
    step["tres"]["allocated"].insert(0, {"type": "license", "name": "gpu", "count": 9})
    step["tres"]["allocated"].insert(0, {"type": "gres", "name": "mps", "count": 7})
    job = {"job_id": 42, "user": "a", "account": "b", "steps": [step]}
    assert slurm_json.steps_of(job)[0].gpus == 2
    assert slurm_json.steps_of({"job_id": 42, "user": "a", "account": "b"}) == []


def test_a_gate_names_its_node_and_any_slurmd_start_registers_it():
    gate = slurm_json.node_gates({"nodes": [sinfo_node(slurmd_start_time=1)]})["n1"]
    assert gate.node == "n1" and gate.registered


@pytest.mark.parametrize(
    ("read", "job", "key"),
    [
        (slurm_json.grant_of, squeue_job(job_state=None), "job_state"),
        (slurm_json.grant_of, squeue_job(user_name=5), "user_name"),
        (slurm_json.grant_of, squeue_job(user_name=None, user_id="x"), "user_name"),
        (slurm_json.steps_of, {"job_id": None, "user": "a", "account": "b"}, "job_id"),
        (slurm_json.steps_of, {"job_id": 4, "user": None, "account": "b"}, "user"),
        (slurm_json.steps_of, {"job_id": 4, "user": "a", "account": None}, "account"),
    ],
)
def test_each_field_that_does_not_parse_is_named_with_its_command(read, job, key):
    refused(read, job, match=f"^{COMMAND[read.__name__]} --json: '{key}' is not")


@pytest.mark.parametrize("key", ["start", "end", "elapsed"])
def test_a_step_time_that_is_not_a_number_is_named(key):
    step = sacct_step(0, 1, 5)
    step["time"][key] = "soon"
    job = {"job_id": 42, "user": "a", "account": "b", "steps": [step]}
    refused(slurm_json.steps_of, job, match=f"^sacct --json: '{key}' is not a whole number")


@pytest.mark.parametrize("key", ["name", "state"])
def test_a_sinfo_field_that_does_not_parse_is_named_with_sinfo(key):
    refused(slurm_json.node_gates, {"nodes": [sinfo_node(**{key: None})]},
            match=f"^sinfo --json: '{key}' is not text")  # fmt: skip


@pytest.mark.parametrize("key", ["job_id", "submit_time", "account"])
def test_a_squeue_field_that_does_not_parse_is_named_with_squeue(key):
    refused(slurm_json.grant_of, squeue_job(**{key: None}), match=f"^squeue --json: '{key}' is not")


def test_a_removed_users_uid_that_is_not_a_number_is_named():
    refused(slurm_json.grant_of, squeue_job(user_name=None, user_id=True),
            match="^squeue --json: 'user_id' is not a whole number")  # fmt: skip
