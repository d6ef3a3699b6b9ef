from __future__ import annotations

import json
import random
from decimal import Decimal

from scheduler.fleet import parse_plan_input
from scheduler.fleetgen import synthetic_plan_input
from scheduler.placement import plan
from tests.scheduler.helpers import gpu, job, node, plan_input


def run(catalogue, raw):
    return plan(parse_plan_input(json.loads(json.dumps(raw)), catalogue), catalogue)


def placed(result) -> dict[str, tuple[str, ...]]:
    return {p.job: p.gpus for p in result.placements}


def test_cheapest_energy_for_the_work_wins(catalogue):
    raw = plan_input(node("v", "V100-SXM2", 1) + node("h", "H100-SXM5-80GB", 1), [job("j")])
    result = run(catalogue, raw)
    assert placed(result) == {"j": ("h-0",)}
    assert result.placements[0].price.coefficient > 3


def test_only_attested_free_gpus_are_used(catalogue):
    gpus = [
        gpu("busy", "H100-SXM5-80GB", "n1", free=False),
        gpu("unattested", "H100-SXM5-80GB", "n1", attested=False),
        gpu("ok", "V100-SXM2", "n2"),
    ]
    assert placed(run(catalogue, plan_input(gpus, [job("j")]))) == {"j": ("ok",)}


def test_precision_and_memory_filter_generations(catalogue):
    gpus = node("v", "V100-SXM2", 2) + node("l", "L40S", 2) + node("a", "A100-PCIE-80GB", 2)
    jobs = [job("fp8", precision="FP8"), job("big", precision="BF16", min_memory_gb=80)]
    result = placed(run(catalogue, plan_input(gpus, jobs)))
    assert result["fp8"][0].startswith("l-")  # only the L40S has FP8 here
    assert result["big"][0].startswith("a-")  # only the A100 80GB has the memory


def test_unplaceable_jobs_get_a_reason(catalogue):
    gpus = node("v", "V100-SXM2", 2) + node("w", "V100-SXM2", 1)
    jobs = [
        job("fp8", precision="FP8"),
        job("wide", gpus=4),
        job("one-node", gpus=3, single_node=True),
        job("huge-memory", min_memory_gb=200),
    ]
    result = run(catalogue, plan_input(gpus, jobs))
    reasons = {u.job: u.reason for u in result.unplaced}
    assert result.placements == ()
    assert "no attested GPU in the fleet supports FP8" in reasons["fp8"]
    assert "the largest eligible pool has 3 attested GPUs" in reasons["wide"]
    assert "the largest eligible node has 2 attested GPUs" in reasons["one-node"]
    assert "at least 200 GB" in reasons["huge-memory"]


def test_capacity_taken_by_higher_priority_is_the_reason(catalogue):
    gpus = node("v", "V100-SXM2", 1)
    result = run(catalogue, plan_input(gpus, [job("first", priority=2), job("second")]))
    assert placed(result) == {"first": ("v-0",)}
    assert "taken by work of priority >= 1" in result.unplaced[0].reason


def test_single_node_job_stays_on_one_node(catalogue):
    gpus = node("n1", "A100-SXM4-80GB", 3) + node("n2", "A100-SXM4-80GB", 4)
    result = run(catalogue, plan_input(gpus, [job("j", gpus=4, single_node=True)]))
    assert result.placements[0].nodes == ("n2",)


def test_multi_gpu_job_never_mixes_generations_or_sites(catalogue):
    gpus = node("h", "H100-SXM5-80GB", 2) + node("a", "A100-SXM4-80GB", 4)
    gpus += node("h2", "H100-SXM5-80GB", 2, site="s2")
    result = run(catalogue, plan_input(gpus, [job("j", gpus=3)]))
    placement = result.placements[0]
    assert placement.generation == "A100-SXM4-80GB" and len(placement.gpus) == 3


def test_higher_priority_preempts_lower_and_reports_it(catalogue):
    gpus = node("n", "L40S", 2, free=False)
    leases = [{"id": "old", "gpus": ["n-0", "n-1"], "priority": 1}]
    result = run(catalogue, plan_input(gpus, [job("urgent", gpus=2, priority=5)], leases))
    assert placed(result) == {"urgent": ("n-0", "n-1")}
    (preemption,) = result.preempted
    assert (preemption.lease, preemption.by_job, preemption.action) == (
        "old",
        "urgent",
        "end_and_settle",
    )
    assert preemption.gpus == ("n-0", "n-1")


def test_equal_or_lower_priority_never_preempts(catalogue):
    gpus = node("n", "L40S", 2, free=False)
    leases = [{"id": "old", "gpus": ["n-0", "n-1"], "priority": 5}]
    result = run(catalogue, plan_input(gpus, [job("same", priority=5)], leases))
    assert result.preempted == () and result.unplaced[0].job == "same"
    assert "no lower-priority lease" in result.unplaced[0].reason


def test_preempts_the_lowest_priority_lease_first(catalogue):
    gpus = node("a", "L40S", 1, free=False) + node("b", "L40S", 1, free=False)
    leases = [
        {"id": "mid", "gpus": ["a-0"], "priority": 3},
        {"id": "low", "gpus": ["b-0"], "priority": 1},
    ]
    result = run(catalogue, plan_input(gpus, [job("j", priority=9)], leases))
    assert [p.lease for p in result.preempted] == ["low"]


def test_a_placed_job_moves_to_make_room(catalogue):
    # Only the L40S does FP8; the FP16 job that got there first must move to the V100.
    gpus = node("l", "L40S", 1) + node("v", "V100-SXM2", 1)
    jobs = [job("fp16", priority=9, hours=1), job("fp8", precision="FP8", priority=1)]
    result = run(catalogue, plan_input(gpus, jobs))
    assert placed(result) == {"fp16": ("v-0",), "fp8": ("l-0",)}


def test_priority_decides_admission_not_the_cheapest_gpus(catalogue):
    # Two jobs, one H100 and one V100: the big low-priority job should get the H100.
    gpus = node("h", "H100-SXM5-80GB", 1) + node("v", "V100-SXM2", 1)
    jobs = [job("small-urgent", hours=1, priority=9), job("big", hours=100, priority=1)]
    assert placed(run(catalogue, plan_input(gpus, jobs))) == {
        "big": ("h-0",),
        "small-urgent": ("v-0",),
    }


def test_plan_total_is_the_sum_of_placement_prices(catalogue):
    result = run(catalogue, synthetic_plan_input(catalogue, 64, 40, seed=3))
    assert result.total_cost == sum((p.price.total for p in result.placements), Decimal(0))


def test_same_input_in_any_order_gives_the_same_plan(catalogue):
    raw = synthetic_plan_input(catalogue, 200, 300, seed=5)
    first = run(catalogue, raw).as_dict()
    rng = random.Random(1)
    for key in ("gpus", "jobs", "leases", "sites"):
        rng.shuffle(raw[key])
    assert run(catalogue, raw).as_dict() == first


def test_every_gpu_is_used_at_most_once_and_preempted_leases_are_reported(catalogue):
    raw = synthetic_plan_input(catalogue, 400, 600, seed=9)
    result = run(catalogue, raw)
    used = [g for p in result.placements for g in p.gpus]
    assert len(used) == len(set(used))
    free = {g["id"] for g in raw["gpus"] if g["free"] and g["attested"]}
    freed = {g for p in result.preempted for g in p.gpus}
    assert set(used) <= free | freed
    assert len(result.placements) + len(result.unplaced) == len(raw["jobs"])
