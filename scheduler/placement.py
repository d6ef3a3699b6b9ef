"""Mixed-generation placement: which queued job runs on which attested, free GPUs.

Policy (deterministic for the same input):
  * eligible GPUs are attested, free (or freed by a preemption), support the job's
    precision and have at least its minimum memory;
  * a job's GPUs share one generation and one site: work is split evenly and a synchronous
    job runs at its slowest GPU's pace, so mixing generations would waste the fast ones;
    `single_node` additionally keeps it on one node;
  * jobs go in order of priority (highest first), then per-GPU work (largest first: by the
    rearrangement inequality the biggest work should get the cheapest energy), then id;
    each takes the pool (or node) where its work costs the tenant least: capacity (GPU-hours
    held x the rate card's hourly rate for its priority) plus attributed energy, the two
    parts of the quote (`Pool.cost`; energy alone without a rate card);
  * a job that does not fit on free capacity may preempt running leases of strictly lower
    priority, lowest priority first; a preempted lease is reported for ending and
    settlement, never dropped;
  * a local-improvement pass then swaps the GPU sets of pairs of jobs when that lowers the
    total cost (see `improve`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from ledger.contract.terms import RateCard
from ledger.money import Terms
from scheduler.catalogue import Catalogue
from scheduler.fleet import Gpu, Job, Lease, PlanInput
from scheduler.improve import MAX_REFIT_PLACEMENTS, improve, refit
from scheduler.pools import Choice, FreeGpu, Pool, best_choice
from scheduler.pricing import GpuCondition, PriceBreakdown, Pricer, PricingPolicy
from scheduler.relocate import MAX_ROOM_TRIES, Budget, make_room
from scheduler.settlement import lease_terms

WORK_KEY_SCALE = 1_000_000


@dataclass(frozen=True)
class Placement:
    job: str
    gpus: tuple[str, ...]
    site: str
    generation: str
    nodes: tuple[str, ...]
    price: PriceBreakdown
    # with a rate card: the ledger's lease terms for this placement (start_ms 0: see
    # lease_terms) and their quote, Terms.quote(), the one price a tenant is shown
    terms: dict[str, object] | None = None
    quote_micro: int | None = None

    def lease_terms(self, start_ms: int) -> dict[str, object]:
        """The terms a lease placed so records on the ledger, starting at `start_ms` (the
        quote does not depend on the start)."""
        if self.terms is None:
            raise ValueError(f"job {self.job} was planned without a rate card: no terms")
        return {**self.terms, "start_ms": start_ms}

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "job": self.job,
            "gpus": list(self.gpus),
            "site": self.site,
            "generation": self.generation,
            "nodes": list(self.nodes),
            "price": self.price.as_dict(),
        }
        if self.terms is not None:
            out["terms"] = self.terms
            out["quote_micro"] = self.quote_micro
        return out


class Unplaced(NamedTuple):  # a tuple: 50,000 of them are built in a big batch
    job: str
    reason: str


@dataclass(frozen=True)
class Preemption:
    """A running lease the plan ends to make room; the caller must end and settle it."""

    lease: str
    gpus: tuple[str, ...]
    priority: int
    by_job: str
    action: str = "end_and_settle"


@dataclass(frozen=True)
class Plan:
    placements: tuple[Placement, ...]
    unplaced: tuple[Unplaced, ...]
    preempted: tuple[Preemption, ...]
    total_cost: Decimal

    def as_dict(self) -> dict[str, object]:
        return {
            "placements": [p.as_dict() for p in self.placements],
            "unplaced": [{"job": u.job, "reason": u.reason} for u in self.unplaced],
            "preempted": [p.__dict__ for p in self.preempted],
            "total_cost": str(self.total_cost),
        }


@dataclass
class _State:
    pools: dict[tuple[str, str], Pool]
    gpu_index: dict[str, Gpu]
    power_keys: dict[str, int]
    leases: list[Lease]  # sorted: lowest priority, then fewest GPUs, then id
    live: set[str]
    lease_pools: dict[str, dict[tuple[str, str], list[FreeGpu]]] = field(default_factory=dict)
    eligible_cache: dict[tuple[str, Decimal], list[Pool]] = field(default_factory=dict)
    failed: dict[tuple[str, Decimal, bool], int] = field(default_factory=dict)
    static: dict[tuple[str, Decimal, bool, int], str | None] = field(default_factory=dict)
    assigned: list[tuple[Job, list[tuple[int, str, str]], Pool]] = field(default_factory=list)
    room_budget: Budget = field(default_factory=lambda: Budget(MAX_ROOM_TRIES))
    refit_budget: Budget = field(default_factory=lambda: Budget(MAX_REFIT_PLACEMENTS))


def _build(data: PlanInput, pricer: Pricer, card: RateCard | None) -> _State:
    pools: dict[tuple[str, str], Pool] = {}
    node_sizes: dict[tuple[str, str, str], int] = {}
    keys: dict[str, int] = {}
    free_by_pool: dict[tuple[str, str], list[FreeGpu]] = {}
    sizes = frozenset(job.gpus for job in data.jobs if job.single_node and job.gpus > 1)
    for gpu in data.gpus:
        if not gpu.attested:
            continue  # never eligible: not tracked at all
        site = data.sites[gpu.site]
        pkey = (gpu.site, gpu.generation)
        pool = pools.get(pkey)
        if pool is None:
            gen = pricer.catalogue.get(gpu.generation)
            pool = pools[pkey] = Pool(
                gpu.site, gen, site.pue, site.tariff_per_kwh, pricer, sizes=sizes, card=card
            )
        pool.attested_total += 1
        nkey = (gpu.site, gpu.generation, gpu.node)
        node_sizes[nkey] = node_sizes.get(nkey, 0) + 1
        pool.largest_node = max(pool.largest_node, node_sizes[nkey])
        keys[gpu.id] = pricer.power_key(gpu.generation, gpu.power_w, gpu.temp_c)
        if gpu.free:
            free_by_pool.setdefault(pkey, []).append(FreeGpu(keys[gpu.id], gpu.id, gpu.node))
    for pkey, gpus in free_by_pool.items():
        pools[pkey].add(gpus)
    index = {gpu.id: gpu for gpu in data.gpus}
    leases = sorted(data.leases, key=lambda lease: (lease.priority, len(lease.gpus), lease.id))
    state = _State(pools, index, keys, leases, {lease.id for lease in leases})
    for lease in leases:
        held: dict[tuple[str, str], list[FreeGpu]] = {}
        for gpu_id in lease.gpus:
            gpu = index[gpu_id]
            if gpu.attested:
                pkey = (gpu.site, gpu.generation)
                held.setdefault(pkey, []).append(FreeGpu(keys[gpu_id], gpu_id, gpu.node))
                pools[pkey].leased += 1
        state.lease_pools[lease.id] = held
    return state


def _eligible(state: _State, job: Job) -> list[Pool]:
    key = (job.precision, job.min_memory_gb)
    pools = state.eligible_cache.get(key)
    if pools is None:
        pools = [
            pool
            for _, pool in sorted(state.pools.items())
            if pool.generation.supports(job.precision)
            and pool.generation.memory_gb >= job.min_memory_gb
        ]
        state.eligible_cache[key] = pools
    return pools


def _static_reason(pools: list[Pool], job: Job) -> str | None:
    """Why a job can never fit this fleet, whatever else is queued or running."""
    what = f"{job.precision} with at least {job.min_memory_gb} GB"
    if not pools:
        return f"no attested GPU in the fleet supports {what}"
    if job.single_node and job.gpus > 1:
        largest = max(pool.largest_node for pool in pools)
        if largest < job.gpus:
            return (
                f"single-node job needs {job.gpus} GPUs ({what}) on one node; "
                f"the largest eligible node has {largest} attested GPUs"
            )
    largest = max(pool.attested_total for pool in pools)
    if largest < job.gpus:
        return (
            f"needs {job.gpus} GPUs ({what}) of one generation at one site; "
            f"the largest eligible pool has {largest} attested GPUs"
        )
    return None


def _preempt(state: _State, pools: list[Pool], job: Job) -> list[Lease]:
    """Leases to end so the job fits: lowest priority first, only on the pool or node
    that reaches the job's size first. Empty when no set of lower-priority leases helps."""
    eligible = {pool.key: pool for pool in pools}
    if all(len(pool.free) + pool.leased < job.gpus for pool in pools):
        return []
    gathered: dict[tuple, list[Lease]] = {}
    counts: dict[tuple, int] = {}
    for lease in state.leases:
        if lease.priority >= job.priority:
            break
        if lease.id not in state.live:
            continue
        for pkey, gpus in state.lease_pools[lease.id].items():
            pool = eligible.get(pkey)
            if pool is None:
                continue
            places: set[tuple[tuple[str, str], str | None]]
            if job.single_node and job.gpus > 1:
                places = {(pkey, gpu.node) for gpu in gpus}
            else:
                places = {(pkey, None)}
            for place in sorted(places, key=str):
                added = sum(1 for gpu in gpus if place[1] is None or gpu.node == place[1])
                counts[place] = counts.get(place, 0) + added
                gathered.setdefault(place, []).append(lease)
                node = pool.nodes.get(place[1]) if place[1] is not None else None
                have = len(pool.free) if place[1] is None else len(node.free) if node else 0
                if have + counts[place] >= job.gpus:
                    return gathered[place]
    return []


def _release(state: _State, lease: Lease) -> None:
    state.live.discard(lease.id)
    for pkey, gpus in state.lease_pools[lease.id].items():
        pool = state.pools[pkey]
        pool.leased -= len(gpus)
        pool.add(gpus)


def _place_one(state: _State, job: Job, pricer: Pricer) -> tuple[bool, list[Lease], str]:
    """Admit one job: free capacity, then moving placed jobs, then re-fitting the whole
    admitted set, then preemption. Appends to `state.assigned` on success."""
    choice, victims, reason = _admit(state, job, pricer)
    if choice is not None:
        state.assigned.append((job, choice.take(job.gpus), choice.pool))
    return choice is not None or not reason, victims, reason


def _admit(state: _State, job: Job, pricer: Pricer) -> tuple[Choice | None, list[Lease], str]:
    static_key = (job.precision, job.min_memory_gb, job.single_node, job.gpus)
    reason = state.static.get(static_key, "")
    if reason == "":
        reason = state.static[static_key] = _static_reason(_eligible(state, job), job)
    if reason:
        return None, [], reason
    # Free plus lower-priority capacity only shrinks as the batch proceeds (jobs come in
    # priority order), so a job no smaller than one that already failed fails too. (With
    # make_room a later attempt could in rare cases still succeed; not retrying is the
    # price of staying linear on a 50,000-job queue.)
    fail_key = (job.precision, job.min_memory_gb, job.single_node)
    if state.failed.get(fail_key, job.gpus + 1) <= job.gpus:
        return None, [], _capacity_reason(job)
    pools = _eligible(state, job)
    choice = best_choice(pools, job)
    if choice is not None:
        return choice, [], ""
    room = make_room(job, state.assigned, lambda j: _eligible(state, j), state.room_budget)
    if room is not None:
        return room[0], [], ""
    eligible = lambda j: _eligible(state, j)  # noqa: E731
    refitted = refit(state.assigned, job, eligible, pricer, state.refit_budget)
    if refitted is not None:
        state.assigned[:] = refitted
        return None, [], ""
    victims = _preempt(state, pools, job)
    for lease in victims:
        _release(state, lease)
    choice = best_choice(pools, job) if victims else None
    if choice is None:  # preempted leases are still reported: never silently dropped
        state.failed[fail_key] = min(state.failed.get(fail_key, job.gpus), job.gpus)
        return None, victims, _capacity_reason(job)
    return choice, victims, ""


@functools.cache
def _capacity_reason_for(precision: str, priority: int) -> str:
    return (
        f"not enough free attested {precision} GPUs: the eligible capacity is taken by "
        f"work of priority >= {priority} and no lower-priority lease frees enough"
    )


def _capacity_reason(job: Job) -> str:
    return _capacity_reason_for(job.precision, job.priority)


def job_order(job: Job, pricer: Pricer) -> tuple:
    """Priority first; then per-GPU work, largest first; then id."""
    return (-job.priority, -pricer.work(job.precision, job.hours), job.id)


def _admission_order(jobs: tuple[Job, ...], pricer: Pricer) -> list[Job]:
    """job_order, with the work as an integer (micro-TFLOPS·h): integer keys sort faster.
    Work is linear in hours, so the pricer's work of one scaled hour is computed once per
    precision."""
    per_hour = {p: pricer.work(p, Decimal(WORK_KEY_SCALE)) for p in {j.precision for j in jobs}}
    return sorted(jobs, key=lambda j: (-j.priority, -int(j.hours * per_hour[j.precision]), j.id))


def plan(
    data: PlanInput,
    catalogue: Catalogue,
    policy: PricingPolicy | None = None,
    card: RateCard | None = None,
) -> Plan:
    """Place queued jobs on the fleet. Pure and deterministic: same input, same plan. With
    `card` (whose site codes are the input's site ids), jobs are ranked by capacity plus
    energy and each placement carries its lease terms and quote."""
    pricer = Pricer(catalogue, policy)
    state = _build(data, pricer, card)
    unplaced: list[Unplaced] = []
    preempted: list[Preemption] = []
    for job in _admission_order(data.jobs, pricer):
        placed, victims, reason = _place_one(state, job, pricer)
        if victims:
            preempted.extend(Preemption(v.id, v.gpus, v.priority, job.id) for v in victims)
        if not placed:
            unplaced.append(Unplaced(job.id, reason))
    assigned = improve(state.assigned, lambda job: _eligible(state, job), pricer)
    placements = tuple(
        _priced(job, taken, pool, state, pricer, data, card) for job, taken, pool in assigned
    )
    total = sum((p.price.total for p in placements), Decimal(0))
    return Plan(placements, tuple(unplaced), tuple(preempted), total)


def _priced(
    job, taken, pool: Pool, state: _State, pricer: Pricer, data: PlanInput, card: RateCard | None
) -> Placement:
    gpus = [state.gpu_index[gpu_id] for _, gpu_id, _ in taken]
    site = data.sites[pool.site]
    conditions = [
        GpuCondition(g.id, g.generation, site.pue, site.tariff_per_kwh, g.power_w, g.temp_c)
        for g in gpus
    ]
    price = pricer.price(job.precision, job.gpus, job.hours, conditions, job.memory_bound)
    nodes = tuple(sorted({g.node for g in gpus}))
    terms, quote = None, None
    if card is not None:
        terms = lease_terms(
            price, pricer.catalogue, card, site=pool.site, priority=job.priority, start_ms=0
        )
        quote = Terms.of(terms).quote()
    return Placement(
        job.id, tuple(g.id for g in gpus), pool.site, pool.generation.id, nodes, price, terms, quote
    )
