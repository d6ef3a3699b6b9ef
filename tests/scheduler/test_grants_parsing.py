"""What Slurm answers is untrusted input: the backend's readers of squeue, sinfo and sacct
JSON and the GPU slot mapping, at their edges and fuzzed. Anything that does not parse is a
ClusterError naming what was wrong, never a crash and never a guess."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.grants import slurm, slurm_conf, slurm_json
from scheduler.grants.interface import ClusterError, GpuSlot, GrantRequest, requests_for

LEASE = "0b7c5e0e-4a57-4a0c-9d1c-1f1f00000001"


def gpu(index: int, node: str = "n1", generation: str = "A100-SXM4-80GB") -> GpuSlot:
    return GpuSlot(uuid=f"GPU-{node}-{index}", node=node, index=index, generation=generation)


def squeue_job(**changes) -> dict:
    job = {
        "job_id": 42,
        "name": f"wattlease.{LEASE}.n1",
        "user_name": "alice",
        "account": "acme",
        "job_state": "RUNNING",
        "submit_time": 1_700_000_000,
        "tres_per_node": "gres:gpu:a100_sxm4_80gb_0:1,gres:gpu:a100_sxm4_80gb_2:1",
        "gres_detail": ["gpu:a100_sxm4_80gb_0:1(IDX:0),gpu:a100_sxm4_80gb_2:1(IDX:2)"],
    }
    job.update(changes)
    return job


def test_each_gpu_has_a_slot_type_of_its_own_and_the_index_comes_back():
    slots = [slurm_conf.slot_type(gpu(i)) for i in range(8)]
    assert slots[2] == "a100_sxm4_80gb_2"
    assert len(set(slots)) == 8
    assert [slurm_conf.slot_index(s) for s in slots] == list(range(8))


@pytest.mark.parametrize("text", ["a100", "a100_", "_1", "A100_1", "a100_1:1", "a100_64", ""])
def test_a_type_that_is_not_a_slot_is_refused(text):
    with pytest.raises(ValueError, match="slot type"):
        slurm_conf.slot_index(text)


def test_the_fragments_name_every_slot_and_its_device():
    gpus = [gpu(1), gpu(0)]
    line = slurm_conf.node_line("n1", gpus, address="10.0.0.5")
    assert "Gres=gpu:a100_sxm4_80gb_0:1,gpu:a100_sxm4_80gb_1:1" in line
    assert slurm_conf.gres_lines("n1", gpus) == [
        "NodeName=n1 Name=gpu Type=a100_sxm4_80gb_0 File=/dev/nvidia0",
        "NodeName=n1 Name=gpu Type=a100_sxm4_80gb_1 File=/dev/nvidia1",
    ]
    with pytest.raises(ValueError, match="plain Slurm node name"):
        slurm_conf.node_line("n[1-4]", gpus)


def test_a_lease_over_two_nodes_is_one_grant_per_node_each_with_its_own_gpus():
    requests = requests_for(
        LEASE, account="acme", user="alice", gpus=[gpu(3, "n2"), gpu(1), gpu(0, "n2")], limit_s=60
    )
    assert [(r.node, [g.index for g in r.gpus]) for r in requests] == [("n1", [1]), ("n2", [0, 3])]
    with pytest.raises(ValueError, match="GPUs on"):
        GrantRequest(LEASE, "acme", "alice", "n1", (gpu(0, "n2"),), 60)


def test_a_running_grant_reads_the_devices_slurm_gave_it():
    grant = slurm_json.grant_of(squeue_job())
    assert grant is not None
    assert (grant.lease, grant.node, grant.slots, grant.running) == (LEASE, "n1", (0, 2), True)


def test_a_pending_grant_reads_the_slots_it_asked_for_and_is_not_held():
    grant = slurm_json.grant_of(squeue_job(job_state="PENDING", gres_detail=[]))
    assert grant is not None
    assert (grant.slots, grant.running) == ((0, 2), False)


def test_a_grant_whose_user_was_removed_reads_as_its_uid_and_stays_visible():
    grant = slurm_json.grant_of(squeue_job(user_name=None, user_id=1234))
    assert grant is not None
    assert (grant.user, grant.handle) == ("uid:1234", "42")
    with pytest.raises(ClusterError, match="user_name"):
        slurm_json.grant_of(squeue_job(user_name=None, user_id="1234"))
    with pytest.raises(ClusterError, match="user_id"):
        slurm_json.grant_of(squeue_job(user_name=None, user_id=True))


@pytest.mark.parametrize("command", ["squeue", "sinfo", "sacct"])
def test_an_answer_with_errors_is_a_cluster_that_could_not_be_asked_not_an_empty_one(command):
    # what 22.05 prints, exit 0, when slurmctld is down
    down = {"errors": [{"description": "Failed while looking for jobs", "error_number": -1}]}
    with pytest.raises(ClusterError, match="could not ask slurmctld: Failed while") as caught:
        slurm_json.refuse_errors({**down, "jobs": []}, command)
    assert caught.value.code == "cluster.unavailable"
    with pytest.raises(ClusterError, match="Unspecified error"):
        slurm_json.refuse_errors({"errors": [{"error": "Unspecified error"}], "nodes": []}, command)
    with pytest.raises(ClusterError, match="not a list") as caught:
        slurm_json.refuse_errors({"errors": "down"}, command)
    assert caught.value.code == "cluster.garbage"
    slurm_json.refuse_errors({"errors": [], "jobs": []}, command)
    slurm_json.refuse_errors({"jobs": []}, command)


def test_a_job_that_is_not_a_grant_is_not_read_as_one():
    assert slurm_json.grant_of(squeue_job(name="train.sh")) is None
    assert slurm_json.grant_of(squeue_job(name=f"wattlease.{LEASE}.n[1-2]")) is None


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"job_id": "42"}, "job_id"),
        ({"job_id": True}, "job_id"),
        ({"account": None}, "account"),
        ({"gres_detail": "gpu:x"}, "gres_detail"),
        ({"gres_detail": ["gpu:a100_0:1(IDX:zero)"]}, "does not parse"),
        ({"gres_detail": [], "tres_per_node": "gres:gpu:2"}, "not a GPU slot"),
        ({"gres_detail": [], "tres_per_node": "gres:gpu:a100:1"}, "slot type"),
        ({"submit_time": None}, "submit_time"),
    ],
)
def test_a_squeue_answer_that_does_not_parse_names_what_is_wrong(changes, named):
    with pytest.raises(ClusterError, match=named) as caught:
        slurm_json.grant_of(squeue_job(**changes))
    assert caught.value.code == "cluster.garbage"


def test_sacct_steps_count_their_gpus_and_gpu_seconds_and_leave_out_the_grants_own():
    def step(step_id, gpus, elapsed):
        return {
            "step": {"id": step_id},
            "state": "COMPLETED",
            "time": {"start": 100, "end": 100 + elapsed, "elapsed": elapsed},
            "tres": {"allocated": [{"type": "cpu", "name": None, "count": 1},
                                   {"type": "gres", "name": "gpu", "count": gpus}]},
        }  # fmt: skip

    job = {"job_id": 42, "user": "alice", "account": "acme",
           "steps": [step("batch", 2, 50), step(0, 2, 30), step(1, 1, 7)]}  # fmt: skip
    jobs = slurm_json.steps_of(job)
    assert [(j.job_id, j.gpus, j.gpu_seconds) for j in jobs] == [("42.0", 2, 60), ("42.1", 1, 7)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(squeue_job())), json_values, max_size=8))
def test_any_squeue_job_is_read_or_refused_with_a_cluster_error(changes):
    with contextlib.suppress(ClusterError):
        slurm_json.grant_of(squeue_job(**changes))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(json_values)
def test_any_sacct_or_sinfo_answer_is_read_or_refused_with_a_cluster_error(value):
    for read in (slurm_json.steps_of, slurm_json.grant_of):
        with contextlib.suppress(ClusterError):
            read(value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_gres_text_is_a_slot_or_a_value_error(text):
    try:
        index = slurm_conf.slot_index(text)
    except ValueError:
        return
    assert 0 <= index < slurm_conf.MAX_GPUS_PER_NODE


def test_text_that_is_not_json_is_a_cluster_error(tmp_path):
    fake = tmp_path / "squeue"
    fake.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller'\n")
    fake.chmod(0o755)
    backend = slurm.SlurmBackend(bin_dir=tmp_path)
    with pytest.raises(ClusterError, match="not JSON") as caught:
        backend.grants()
    assert caught.value.code == "cluster.garbage"
    fake.write_text("#!/bin/sh\necho " + json.dumps(json.dumps([1])) + "\n")
    with pytest.raises(ClusterError, match="answered a list"):
        backend.grants()


def test_a_command_that_hangs_is_a_timeout_and_a_missing_one_says_what_to_install(tmp_path):
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    backend = slurm.SlurmBackend(bin_dir=tmp_path, timeout_s=0.5)
    with pytest.raises(ClusterError, match="did not answer within") as caught:
        backend.nodes()
    assert caught.value.code == "cluster.timeout"
    with pytest.raises(ClusterError, match="install slurm-client") as caught:
        slurm.SlurmBackend(bin_dir=tmp_path / "none").nodes()
    assert caught.value.code == "cluster.not_installed"
