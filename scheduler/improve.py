"""Improvement passes after admission. Priority decides *whether* a job runs; these passes
decide *where*, to lower what the admitted work costs its tenants (capacity + attributed
energy, `Pool.cost`):

1. Re-place: give every admitted GPU back and place the admitted jobs again in a few
   candidate orders (per-GPU work, largest first: the rearrangement inequality; regret;
   cost), keeping the cheapest order that fits every admitted job. Admission ran in
   priority order, so a small high-priority job may have taken the cheapest pool from a
   big low-priority one.
2. Move: each job in turn gives its GPUs back and takes the cheapest option now free.
   Then group re-placement and forced pool moves (`scheduler.relocate`).
3. Swap: two jobs of the same size exchange GPU sets when both stay feasible and the total
   drops. Needed across precisions: an H100's FP32 advantage over an A100 is not its FP16
   advantage, so jobs rank pools differently. Bounded by MAX_PAIR_CHECKS.
4. Move again (a swap can open a cheaper free option).

Swap costs are integers scaled from the pricer's Decimal rates (`Pricer.rate`): they only
rank; every price in the plan is computed afterwards by `scheduler.pricing`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from scheduler.fleet import Job
from scheduler.pools import Choice, Pool, best_choice, ranked_choices
from scheduler.pricing import MW_PER_W, Pricer
from scheduler.relocate import (
    MAX_FORCE_MOVES,
    Budget,
    force_pool,
    group_replace,
    place_in_order,
    total_cost,
)

MAX_REPLACE_PLACEMENTS = 5_000  # job placements spent by the re-place pass
MAX_SHUFFLES = 48  # seeded random orders tried on top of the heuristic ones
SHUFFLE_SEED = 0x5EED  # fixed: the same input always gives the same plan
SECOND_BEST_P = 0.25  # in shuffled restarts, how often a job takes its second-best option
MAX_REFIT_PLACEMENTS = 40_000  # job placements spent re-fitting during admission, per plan
MAX_REFIT_PER_JOB = 3_000  # ... and per job that does not fit
MAX_REFIT_SHUFFLES = 400
FIXED_ORDERS = 6
REFIT_MAX_JOBS = 200  # re-fitting a bigger admitted set per failing job costs too much
MAX_PAIR_CHECKS = 60_000  # pair evaluations per plan: ~0.1 s on the reference VM
MAX_PASSES = 4
WORK_SCALE = Decimal(1000)  # per-GPU work in mTFLOPS·h, for integer ranking
FACTOR_SCALE = Decimal(10) ** 12

Taken = list[tuple[int, str, str]]


@dataclass(slots=True)
class _Slot:
    job: Job
    taken: Taken
    pool: Pool
    key: tuple[str, str]  # the pool's key, cached: the inner loop reads it constantly
    rates: dict[tuple[str, str], int]  # pool -> scaled cost per unit of power key
    capacity: dict[tuple[str, str], int]  # pool -> scaled capacity cost of the job's set
    power: int  # sum of the set's power keys
    one_node: bool  # the set sits on a single node
    needs_one_node: bool


def _rates(
    job: Job, pools: list[Pool], pricer: Pricer, cache: dict
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Scaled cost rate of this job on each pool it may use (absent: not allowed), and the
    scaled capacity cost of its set there."""
    key = (job.precision, job.min_memory_gb, job.memory_bound, job.priority, job.gpus)
    rates = cache.get(key)
    if rates is None:
        rates = cache[key] = [
            (
                pool.key,
                int(pool.rate(job) * FACTOR_SCALE),
                int(job.gpus * pool.capacity_rate(job) * FACTOR_SCALE),
            )
            for pool in pools
            if pool.generation.supports(job.precision)
            and pool.generation.memory_gb >= job.min_memory_gb
        ]
    work = int(_work(job, pricer) * WORK_SCALE)
    return (
        {pool_key: work * rate for pool_key, rate, _ in rates},
        {pool_key: work * capacity for pool_key, _, capacity in rates},
    )


Assigned = list[tuple[Job, Taken, Pool]]
Eligible = Callable[[Job], list[Pool]]


def improve(assigned: Assigned, eligible: Eligible, pricer: Pricer) -> Assigned:
    """The four passes of the module docstring; deterministic (fixed visiting orders).
    The pools' free lists are kept in step with the returned assignment."""
    assigned = replace_by_work(assigned, eligible, pricer)
    assigned = move(assigned, eligible)
    assigned = group_replace(assigned, eligible, pricer)
    assigned = force_pool(assigned, eligible, pricer, Budget(MAX_FORCE_MOVES))
    swapped = swap(assigned, pricer)
    if [t for _, t, _ in swapped] == [t for _, t, _ in assigned]:
        return swapped  # nothing moved, so no free option got cheaper
    return move(swapped, eligible)


def _work(job: Job, pricer: Pricer) -> Decimal:
    return pricer.work(job.precision, job.hours)


def _pool_costs(job: Job, eligible: Eligible, pricer: Pricer) -> list[Decimal]:
    """The job's cost on each pool it may use at datasheet power, cheapest first."""
    work = _work(job, pricer)
    return sorted(
        work * pool.cost(job, job.gpus * pool.generation.board_power_w * MW_PER_W)
        for pool in eligible(job)
    )


def _orders(
    jobs: list[Job],
    eligible: Eligible,
    pricer: Pricer,
    placements: int,
    max_shuffles: int = MAX_SHUFFLES,
) -> list[list[Job]]:
    """Candidate placement orders. By per-GPU work (the rearrangement order within one
    precision); by regret (how much a job loses if its best pool is gone: across
    precisions jobs rank pools differently, and a job with one usable pool has infinite
    regret); most constrained first; by the job's cost on its best pool; the admission
    order itself; then seeded shuffles while `placements` (job placements to spend) last.
    Small instances thus get a broad multi-start search, huge ones a few good orders."""
    costs: dict[str, list[Decimal]] = {}

    def cost(job: Job) -> list[Decimal]:  # computed only when an order needs it
        if job.id not in costs:
            costs[job.id] = _pool_costs(job, eligible, pricer)
        return costs[job.id]

    def regret(job: Job) -> Decimal:
        c = cost(job)
        return c[1] - c[0] if len(c) > 1 else Decimal("Infinity")

    def room(job: Job) -> Decimal:  # how many times over its eligible capacity holds it
        return Decimal(sum(p.attested_total for p in eligible(job))) / job.gpus

    keys = [
        lambda j: (-_work(j, pricer), -j.gpus, j.id),
        lambda j: (room(j), -j.gpus, j.id),
        lambda j: (-regret(j), -j.gpus, j.id),
        lambda j: (-cost(j)[0], -j.gpus, j.id),
        None,  # the admission order itself
    ]
    affordable = max(1, placements // max(len(jobs), 1))
    orders = [sorted(jobs, key=key) if key else list(jobs) for key in keys[:affordable]]
    rng = random.Random(SHUFFLE_SEED)
    for _ in range(min(max_shuffles, affordable - len(orders))):
        shuffled = list(jobs)
        rng.shuffle(shuffled)
        orders.append(shuffled)
    return orders


def _place_in_order(
    order: list[Job], eligible: Eligible, rng: random.Random | None = None
) -> Assigned | None:
    """Place every job in this order on the (emptied) pools; pools restored afterwards.
    With `rng`, a job sometimes takes its second-best option (a randomised restart: the
    optimum often needs one job to step aside for two others, which no order reaches)."""

    def pick(job: Job) -> Choice | None:
        if rng is not None and rng.random() < SECOND_BEST_P:
            ranked = ranked_choices(eligible(job), job)
            return ranked[1] if len(ranked) > 1 else (ranked[0] if ranked else None)
        return best_choice(eligible(job), job)

    return place_in_order(order, pick)


def refit(
    assigned: Assigned, job: Job, eligible: Eligible, pricer: Pricer, budget
) -> Assigned | None:
    """Admission's last resort before preemption: can the admitted jobs plus `job` all fit
    if everything is placed again, in one of the candidate orders? Returns the cheapest
    complete assignment (pools updated) or None (pools unchanged). Orders: the heuristic
    ones, then seeded randomised restarts (the cost matters too: the improvement passes
    that follow are local and cannot undo a poor packing)."""
    if len(assigned) + 1 > REFIT_MAX_JOBS or budget.left < (len(assigned) + 1) * FIXED_ORDERS:
        return None
    extended = [*(j for j, _, _ in assigned), job]
    orders = _orders(
        extended, eligible, pricer, min(budget.left, MAX_REFIT_PER_JOB), MAX_REFIT_SHUFFLES
    )
    for _, taken, pool in assigned:
        pool.give_back(taken)
    rng = random.Random(SHUFFLE_SEED)
    best, best_cost = None, None
    for number, order in enumerate(orders):
        budget.left -= len(extended)
        placed = _place_in_order(order, eligible, rng if number >= FIXED_ORDERS else None)
        if placed is not None and (best_cost is None or total_cost(placed, pricer) < best_cost):
            best, best_cost = placed, total_cost(placed, pricer)
    for _, taken, pool in best or assigned:
        pool.take_exact(taken)
    return best


def replace_by_work(assigned: Assigned, eligible: Eligible, pricer: Pricer) -> Assigned:
    """Re-place the admitted jobs in each candidate order; keep the cheapest complete one
    (the admission assignment competes too, so this never makes things worse)."""
    best, best_cost = assigned, total_cost(assigned, pricer)
    for _, taken, pool in assigned:
        pool.give_back(taken)
    rng = random.Random(SHUFFLE_SEED)
    orders = _orders([j for j, _, _ in assigned], eligible, pricer, MAX_REPLACE_PLACEMENTS)
    for number, order in enumerate(orders):
        placed = _place_in_order(order, eligible, rng if number >= FIXED_ORDERS else None)
        if placed is not None and (cost := total_cost(placed, pricer)) < best_cost:
            best, best_cost = placed, cost
    for _, taken, pool in best:
        pool.take_exact(taken)
    return best


def move(assigned: Assigned, eligible: Eligible) -> Assigned:
    result: Assigned = []
    for job, taken, pool in assigned:
        pool.give_back(taken)
        choice = best_choice(eligible(job), job)
        assert choice is not None  # its own GPUs are free again
        result.append((job, choice.take(job.gpus), choice.pool))
    return result


def swap(assigned: Assigned, pricer: Pricer) -> Assigned:
    """Pairwise swaps of equal-size GPU sets; the set of taken GPUs does not change."""
    pools = sorted({pool.key: pool for _, _, pool in assigned}.values(), key=lambda p: p.key)
    factor_cache: dict = {}
    by_size: dict[int, list[_Slot]] = {}
    slots = []
    for job, taken, pool in assigned:
        rates, capacity = _rates(job, pools, pricer, factor_cache)
        slot = _Slot(
            job,
            taken,
            pool,
            pool.key,
            rates,
            capacity,
            sum(key for key, _, _ in taken),
            len({node for _, _, node in taken}) == 1,
            job.single_node and job.gpus > 1,
        )
        slots.append(slot)
        by_size.setdefault(job.gpus, []).append(slot)
    checks = 0
    for _ in range(MAX_PASSES):
        changed = False
        for members in by_size.values():
            for pos, a in enumerate(members):
                rest = members[pos + 1 :]
                checks += len(rest)
                if checks > MAX_PAIR_CHECKS:
                    return _result(slots)
                for b in rest:
                    changed |= _try_swap(a, b)
        if not changed:
            break
    return _result(slots)


def _result(slots: list[_Slot]) -> list[tuple[Job, Taken, Pool]]:
    return [(s.job, s.taken, s.pool) for s in slots]


def _try_swap(a: _Slot, b: _Slot) -> bool:
    a_rate = a.rates.get(b.key)
    if a_rate is None or (a.needs_one_node and not b.one_node):
        return False
    b_rate = b.rates.get(a.key)
    if b_rate is None or (b.needs_one_node and not a.one_node):
        return False
    now = (
        a.rates[a.key] * a.power + a.capacity[a.key] + b.rates[b.key] * b.power + b.capacity[b.key]
    )
    if a_rate * b.power + a.capacity[b.key] + b_rate * a.power + b.capacity[a.key] >= now:
        return False
    a.taken, b.taken = b.taken, a.taken
    a.pool, b.pool = b.pool, a.pool
    a.key, b.key = b.key, a.key
    a.power, b.power = b.power, a.power
    a.one_node, b.one_node = b.one_node, a.one_node
    return True
