"""Exact reference placement for small instances: a MILP solved by HiGHS (scipy).

Used by the quality test and the benchmark to measure how far the greedy policy is from
the optimum. It solves the same problem the policy does, for instances where every job can
be placed: every job placed, each GPU used at most once, a job's GPUs in one pool (site,
generation) that supports its precision and memory, single-node jobs on one node; minimise
what the tenants pay: the total attributed energy cost, plus with a rate card the capacity
held (runtime x the hourly rate for the job's priority). GPUs that are busy or not attested
are left out. Preemption is not modelled (instances for this solver have no leases).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from ledger.contract.terms import RateCard
from ledger.money import MICRO_PER_UNIT
from scheduler.catalogue import Catalogue
from scheduler.fleet import PlanInput
from scheduler.pricing import GpuCondition, Pricer, PricingPolicy

MAX_VARIABLES = 20_000  # beyond this the "small instance" promise is broken


@dataclass(frozen=True)
class ExactResult:
    feasible: bool
    cost: float  # optimum total cost (currency units); only meaningful when feasible
    assignment: dict[str, tuple[str, ...]]  # job -> GPU ids


def job_gpu_costs(
    data: PlanInput,
    catalogue: Catalogue,
    policy: PricingPolicy | None = None,
    card: RateCard | None = None,
):
    """cost[job][gpu] for every eligible (job, GPU) pair, from the pricing module."""
    pricer = Pricer(catalogue, policy)
    costs: dict[str, dict[str, float]] = {}
    for job in data.jobs:
        work = pricer.work(job.precision, job.hours)
        row = {}
        for gpu in data.gpus:
            gen = catalogue.get(gpu.generation)
            if not (gpu.free and gpu.attested and gen.supports(job.precision)):
                continue
            if gen.memory_gb < job.min_memory_gb:
                continue
            site = data.sites[gpu.site]
            cond = GpuCondition(
                gpu.id, gpu.generation, site.pue, site.tariff_per_kwh, gpu.power_w, gpu.temp_c
            )
            cost = work * pricer.unit_cost(cond, job.precision, job.memory_bound)
            if card is not None:
                hourly = card.capacity_rate(gpu.generation, job.priority)
                runtime = pricer.runtime_hours(
                    gpu.generation, job.precision, job.hours, job.memory_bound
                )
                cost += runtime * hourly / MICRO_PER_UNIT
            row[gpu.id] = float(cost)
        costs[job.id] = row
    return costs


def solve_exact(
    data: PlanInput,
    catalogue: Catalogue,
    policy: PricingPolicy | None = None,
    card: RateCard | None = None,
) -> ExactResult:
    costs = job_gpu_costs(data, catalogue, policy, card)
    gpu_by_id = {gpu.id: gpu for gpu in data.gpus}
    columns: list[tuple] = []  # ("x", job, gpu) | ("z", job, pool) | ("y", job, node)
    for job in data.jobs:
        pools = sorted({(gpu_by_id[g].site, gpu_by_id[g].generation) for g in costs[job.id]})
        columns += [("x", job.id, g) for g in sorted(costs[job.id])]
        columns += [("z", job.id, p) for p in pools]
        if job.single_node and job.gpus > 1:
            nodes = sorted(
                {
                    (gpu_by_id[g].site, gpu_by_id[g].generation, gpu_by_id[g].node)
                    for g in costs[job.id]
                }
            )
            columns += [("y", job.id, n) for n in nodes]
    if len(columns) > MAX_VARIABLES:
        raise ValueError(f"instance too large for the exact solver: {len(columns)} variables")
    col = {key: index for index, key in enumerate(columns)}
    rows: list[tuple[dict[int, float], float, float]] = []
    for job in data.jobs:
        xs = [col[("x", job.id, g)] for g in costs[job.id]]
        zs = [index for key, index in col.items() if key[0] == "z" and key[1] == job.id]
        ys = [index for key, index in col.items() if key[0] == "y" and key[1] == job.id]
        rows.append(({i: 1.0 for i in xs}, job.gpus, job.gpus))
        rows.append(({i: 1.0 for i in zs}, 1, 1))
        if ys:
            rows.append(({i: 1.0 for i in ys}, 1, 1))
        for g in costs[job.id]:
            gpu = gpu_by_id[g]
            z = col[("z", job.id, (gpu.site, gpu.generation))]
            rows.append(({col[("x", job.id, g)]: 1.0, z: -1.0}, -np.inf, 0))
            if ys:
                y = col[("y", job.id, (gpu.site, gpu.generation, gpu.node))]
                rows.append(({col[("x", job.id, g)]: 1.0, y: -1.0}, -np.inf, 0))
    for gpu in data.gpus:
        users = [index for key, index in col.items() if key[0] == "x" and key[2] == gpu.id]
        if users:
            rows.append(({i: 1.0 for i in users}, -np.inf, 1))
    if not columns:
        return ExactResult(not data.jobs, 0.0, {})
    matrix = lil_matrix((len(rows), len(columns)))
    for r, (coeffs, _, _) in enumerate(rows):
        for c, value in coeffs.items():
            matrix[r, c] = value
    objective = np.array([costs[key[1]][key[2]] if key[0] == "x" else 0.0 for key in columns])
    result = milp(
        objective,
        constraints=LinearConstraint(
            matrix.tocsr(), [lo for _, lo, _ in rows], [hi for _, _, hi in rows]
        ),
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 1e-9},
    )
    if result.status != 0 or result.x is None:
        return ExactResult(False, 0.0, {})
    assignment: dict[str, list[str]] = {job.id: [] for job in data.jobs}
    for key, index in col.items():
        if key[0] == "x" and result.x[index] > 0.5:
            assignment[key[1]].append(key[2])
    return ExactResult(
        True, float(result.fun), {job: tuple(sorted(g)) for job, g in assignment.items()}
    )
