"""Whatever the instance, a plan obeys the policy's hard rules."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.catalogue import load_catalogue
from scheduler.fleet import parse_plan_input
from scheduler.fleetgen import synthetic_plan_input
from scheduler.placement import plan

CATALOGUE = load_catalogue()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    gpus=st.integers(1, 120),
    jobs=st.integers(0, 60),
    per_node=st.sampled_from([1, 2, 4, 8]),
    busy=st.sampled_from([0.0, 0.3, 0.7]),
)
def test_plans_respect_eligibility_pools_nodes_and_priorities(seed, gpus, jobs, per_node, busy):
    raw = synthetic_plan_input(
        CATALOGUE, gpus, jobs, seed=seed, sites=3, gpus_per_node=per_node, busy_fraction=busy
    )
    data = parse_plan_input(json.loads(json.dumps(raw)), CATALOGUE)
    result = plan(data, CATALOGUE)
    gpu = {g.id: g for g in data.gpus}
    job = {j.id: j for j in data.jobs}
    lease = {lease.id: lease for lease in data.leases}
    freed = {g for p in result.preempted for g in p.gpus}
    used: set[str] = set()
    for p in result.placements:
        j = job[p.job]
        assert len(p.gpus) == j.gpus and not used & set(p.gpus)
        used |= set(p.gpus)
        chosen = [gpu[g] for g in p.gpus]
        assert all(g.attested and (g.free or g.id in freed) for g in chosen)
        assert {(g.site, g.generation) for g in chosen} == {(p.site, p.generation)}
        gen = CATALOGUE.get(p.generation)
        assert gen.supports(j.precision) and gen.memory_gb >= j.min_memory_gb
        if j.single_node:
            assert len({g.node for g in chosen}) == 1
        assert p.price.total == sum(line.cost for line in p.price.lines)
    for pre in result.preempted:
        assert pre.priority < job[pre.by_job].priority
        assert pre.gpus == lease[pre.lease].gpus
    assert len({p.lease for p in result.preempted}) == len(result.preempted)
    assert {p.job for p in result.placements} | {u.job for u in result.unplaced} == set(job)
    assert all(u.reason for u in result.unplaced)
