"""Relocation moves that a one-job-at-a-time greedy cannot see.

* `make_room`: a job that does not fit may still fit if already-placed jobs move
  elsewhere (e.g. a 2-GPU FP16 job sitting on the only FP8-capable node). Tried before
  preemption: moving a job costs energy, ending a lease costs a tenant its run.
* `group_replace`: give two to four placed jobs' GPUs back and place them again in every
  order; keep the cheapest outcome. Fixes packing mistakes, e.g. a 2-GPU job splitting the
  only 4-GPU node that a 4-GPU single-node job needed.

All are bounded (MAX_ROOM_TRIES, MAX_GROUP_TRIALS, MAX_FORCE_MOVES) so a 50,000-job
batch stays fast; all are deterministic (fixed visiting order) and never leave the pools
out of step with the assignment.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal

from scheduler.fleet import Job
from scheduler.pools import Choice, Pool, best_choice
from scheduler.pricing import Pricer

MAX_ROOM_TRIES = 1_000  # relocations tried per plan by make_room
ROOM_SCAN = 512  # make_room looks at the most recently admitted (lowest-priority) jobs
MAX_GROUP_TRIALS = 800  # job groups re-placed per plan by group_replace
MAX_GROUP = 4  # largest group (4! = 24 orders each)
MAX_FORCE_MOVES = 1_500  # (job, pool) moves tried per plan by force_pool
FORCE_MAX_JOBS = 300
MAX_PERMUTED = 4  # lifted jobs re-placed in every order up to this many (4! = 24)

Taken = list[tuple[int, str, str]]
Assigned = list[tuple[Job, Taken, Pool]]
Eligible = Callable[[Job], list[Pool]]


class Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


def make_room(
    job: Job, assigned: Assigned, eligible: Eligible, budget: Budget
) -> tuple[Choice, list[int]] | None:
    """Find placed jobs whose moves let `job` fit. Pools are tried in key order; in a pool,
    occupants are lifted lowest priority first until the job fits there, then re-placed
    anywhere. On success their entries in `assigned` are updated and the choice for `job`
    is returned with their indexes; otherwise everything is as before."""
    pools = eligible(job)
    wanted = {pool.key: pool for pool in pools}
    by_pool: dict[tuple[str, str], list[int]] = {}
    if budget.left <= 0:
        return None
    stop = max(-1, len(assigned) - 1 - ROOM_SCAN)
    for i in range(len(assigned) - 1, stop, -1):  # lowest priority first
        key = assigned[i][2].key
        if key in wanted:
            by_pool.setdefault(key, []).append(i)
    for pool in pools:
        occupants = by_pool.get(pool.key, [])
        if len(pool.free) + sum(assigned[i][0].gpus for i in occupants) < job.gpus:
            continue
        lifted: list[int] = []
        for index in occupants:
            if not budget.spend():
                break
            pool.give_back(assigned[index][1])
            lifted.append(index)
            if best_choice([pool], job) is not None:
                break
        moved = _rehome(job, pool, lifted, assigned, eligible)
        if moved is not None:
            for index, placement in moved.items():
                assigned[index] = placement
            again = best_choice(pools, job)
            assert again is not None  # the GPUs it was given are free again
            return again, sorted(moved)
        for index in lifted:
            pool.take_exact(assigned[index][1])
        if budget.left <= 0:
            return None
    return None


def _rehome(job: Job, pool: Pool, lifted: list[int], assigned: Assigned, eligible: Eligible):
    """With `lifted` jobs off the pool: place `job` there, then the lifted jobs anywhere.
    Returns their new placements (with `job`'s GPUs given back), or None and no change."""
    choice = best_choice([pool], job)
    if choice is None:
        return None
    mine = choice.take(job.gpus)
    moved: dict[int, tuple[Job, Taken, Pool]] = {}
    for index in sorted(lifted, key=lambda i: (-assigned[i][0].gpus, assigned[i][0].id)):
        other = assigned[index][0]
        found = best_choice(eligible(other), other)
        if found is None:
            break
        moved[index] = (other, found.take(other.gpus), found.pool)
    choice.pool.give_back(mine)
    if len(moved) < len(lifted):
        for _, taken, where in moved.values():
            where.give_back(taken)
        return None
    return moved


def cost(job: Job, taken: Taken, pool: Pool, pricer: Pricer) -> Decimal:
    """What the tenant pays for one placement (capacity + energy), in the pricer's search
    units."""
    power = sum(key for key, _, _ in taken)
    return pricer.work(job.precision, job.hours) * pool.cost(job, power)


def total_cost(placements: Iterable[tuple[Job, Taken, Pool]], pricer: Pricer) -> Decimal:
    return sum((cost(job, taken, pool, pricer) for job, taken, pool in placements), Decimal(0))


def place_in_order(jobs: Sequence[Job], pick: Callable[[Job], Choice | None]) -> Assigned | None:
    """Place the jobs one after another, each where `pick` chooses. Returns the placements,
    or None when one does not fit; either way the pools are left as they were."""
    placed: Assigned = []
    for job in jobs:
        choice = pick(job)
        if choice is None:
            break
        placed.append((job, choice.take(job.gpus), choice.pool))
    for _, taken, pool in placed:
        pool.give_back(taken)
    return placed if len(placed) == len(jobs) else None


def _place_group(jobs: tuple[Job, ...], eligible: Eligible, pricer: Pricer):
    """Place jobs in this order; returns (cost, placements) or None; pools restored."""
    placed = place_in_order(jobs, lambda job: best_choice(eligible(job), job))
    return None if placed is None else (total_cost(placed, pricer), placed)


def group_replace(assigned: Assigned, eligible: Eligible, pricer: Pricer) -> Assigned:
    """Give k placed jobs' GPUs back (k = 2, 3, 4: pairs first) and place them again in
    every order; keep the cheapest outcome if it beats the current one. k = 4 reaches
    chains such as: a big FP32 job takes the pool two small jobs were on, one of them
    moves where a third was, and the third takes the big job's old GPUs."""
    result = list(assigned)
    budget = Budget(MAX_GROUP_TRIALS)
    for size in range(2, MAX_GROUP + 1):
        for group in itertools.combinations(range(len(result)), size):
            if not budget.spend():
                return result
            before = [result[i] for i in group]
            now = total_cost(before, pricer)
            for _, taken, pool in before:
                pool.give_back(taken)
            best = None
            for order in itertools.permutations(j for j, _, _ in before):
                outcome = _place_group(order, eligible, pricer)
                if outcome and outcome[0] < now and (best is None or outcome[0] < best[0]):
                    best = outcome
            if best is None:
                for _, taken, pool in before:
                    pool.take_exact(taken)
                continue
            index = {id(job): i for i, (job, _, _) in zip(group, before, strict=True)}
            for job, taken, pool in best[1]:
                pool.take_exact(taken)
                result[index[id(job)]] = (job, taken, pool)
    return result


def _lift(pool: Pool, result: Assigned, skip: int) -> list[int]:
    lifted = [i for i, (_, _, p) in enumerate(result) if p is pool and i != skip]
    for i in lifted:
        pool.give_back(result[i][1])
    return lifted


def force_pool(assigned: Assigned, eligible: Eligible, pricer: Pricer, budget: Budget) -> Assigned:
    """Large-neighbourhood moves: put job `a` on pool P even if P is full, lifting P's other
    jobs, then re-place the lifted jobs greedily (in each of a few orders). Kept when every
    job still fits and the total drops. Reaches arrangements no single order of the greedy
    can, e.g. a job giving up the cheapest pool for the second cheapest so two others fit.
    Only for batches of up to FORCE_MAX_JOBS placed jobs (each move scans the batch)."""
    result = list(assigned)
    if len(result) > FORCE_MAX_JOBS:
        return result
    for a in range(len(result)):
        for pool in eligible(result[a][0]):
            if result[a][2] is pool:
                continue
            if not budget.spend():
                return result
            _, taken, home = result[a]
            home.give_back(taken)
            lifted = _lift(pool, result, a)
            before = {i: result[i] for i in [a, *lifted]}
            old = total_cost(before.values(), pricer)
            best = None
            for order in _lift_orders(lifted, result):
                trial = _trial(a, pool, order, result, eligible, pricer)
                if trial is not None and trial[0] < old and (best is None or trial[0] < best[0]):
                    best = trial
            if best is not None:
                for i, (job, t, p) in best[1].items():
                    p.take_exact(t)
                    result[i] = (job, t, p)
                continue
            for _, t, p in before.values():
                p.take_exact(t)
    return result


def _lift_orders(lifted: list[int], result: Assigned) -> list[list[int]]:
    if len(lifted) <= MAX_PERMUTED:
        return [list(order) for order in itertools.permutations(lifted)]
    by_work = sorted(
        lifted, key=lambda i: (-result[i][0].hours * result[i][0].gpus, result[i][0].id)
    )
    return [by_work, by_work[::-1]]


def _trial(a: int, pool: Pool, order: list[int], result: Assigned, eligible, pricer):
    """Place job a on `pool`, then the lifted jobs in `order` anywhere. Returns (cost,
    placements) or None; either way the pools are as they were when called."""
    pinned = result[a][0]

    def pick(job: Job) -> Choice | None:
        return best_choice([pool] if job is pinned else eligible(job), job)

    indices = [a, *order]
    placed = place_in_order([result[i][0] for i in indices], pick)
    if placed is None:
        return None
    return total_cost(placed, pricer), dict(zip(indices, placed, strict=True))
