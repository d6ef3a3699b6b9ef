"""Free-capacity index for the placement policy.

GPUs are bucketed into equivalence classes so a job never scans the fleet:
  * a *pool* is (site, generation): one PUE, one tariff, one datasheet. Within a pool the
    only thing that orders GPUs is their live power key (measured or datasheet watts x
    temperature derating, in mW), and that order is the same at every precision;
  * a *node* is (site, generation, node): the unit a single-node job must fit into.
Each pool keeps its free GPUs in one sorted list, and for every size k a lazy heap of
(sum of the k cheapest free GPUs on a node, node) so the best node for a k-GPU single-node
job is a heap peek. Entries go stale when a node changes (version counter) and are dropped
when they reach the top.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from decimal import Decimal

from ledger.contract.terms import RateCard
from scheduler.catalogue import Generation
from scheduler.fleet import Job
from scheduler.pricing import Pricer

HEAP_SLACK = 4  # a size heap is compacted when it holds this many entries per node


@dataclass(slots=True)
class FreeGpu:
    power_key: int  # mW, after derating: the within-pool ranking
    gpu: str
    node: str


@dataclass(slots=True)
class NodeFree:
    name: str
    free: list[tuple[int, str]] = field(default_factory=list)  # sorted (power_key, gpu)
    version: int = 0


@dataclass(slots=True)
class Pool:
    site: str
    generation: Generation
    pue: Decimal
    tariff_per_kwh: Decimal
    pricer: Pricer
    free: list[tuple[int, str, str]] = field(default_factory=list)  # (power_key, gpu, node)
    nodes: dict[str, NodeFree] = field(default_factory=dict)
    heaps: dict[int, list[tuple[int, str, int]]] = field(default_factory=dict)
    attested_total: int = 0  # attested GPUs of this pool, free or busy
    largest_node: int = 0  # most attested GPUs on one node of this pool
    leased: int = 0  # attested GPUs held by live, preemptible leases
    sizes: frozenset[int] = frozenset()  # single-node job sizes in the queue: heaps kept
    rates: dict[str | tuple[str, Decimal], Decimal] = field(default_factory=dict)
    card: RateCard | None = None  # the capacity rates; None: energy alone is ranked
    capacity_rates: dict[tuple[str, Decimal, int], Decimal] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.site, self.generation.id)

    def rate(self, job: Job) -> Decimal:
        """The pricer's rate for the job's work on this pool (`Pricer.rate`), cached per
        (precision, memory-bound fraction)."""
        # The hot path (every candidate pool of every placement) keys compute-bound jobs by
        # precision alone: hashing a Decimal per call costs more than the lookup.
        key = (job.precision, job.memory_bound) if job.memory_bound else job.precision
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = self.pricer.rate(
                self.generation, job.precision, self.pue, self.tariff_per_kwh, job.memory_bound
            )
        return rate

    def capacity_rate(self, job: Job) -> Decimal | int:
        """The pricer's capacity rate of one of this pool's GPUs for the job
        (`Pricer.capacity_rate`, at the rate card's hourly rate for its priority), cached;
        0 without a rate card."""
        if self.card is None:
            return 0
        key = (job.precision, job.memory_bound, job.priority)
        rate = self.capacity_rates.get(key)
        if rate is None:
            hourly = self.card.capacity_rate(self.generation.id, job.priority)
            rate = self.capacity_rates[key] = self.pricer.capacity_rate(
                self.generation, job.precision, hourly, job.memory_bound
            )
        return rate

    def cost(self, job: Job, power: int | Decimal) -> Decimal:
        """Ranking key of `job.gpus` of this pool's GPUs with summed power keys `power`: the
        search units of `Pricer.search_cost` for one TFLOPS·h of per-GPU work."""
        return power * self.rate(job) + job.gpus * self.capacity_rate(job)

    def add(self, gpus: list[FreeGpu]) -> None:
        """Make GPUs free (at start, or when a preempted lease ends)."""
        touched: dict[str, NodeFree] = {}
        for gpu in gpus:
            insort(self.free, (gpu.power_key, gpu.gpu, gpu.node))
            node = self.nodes.setdefault(gpu.node, NodeFree(gpu.node))
            insort(node.free, (gpu.power_key, gpu.gpu))
            touched[gpu.node] = node
        for node in touched.values():
            self._touch(node)

    def cheapest_sum(self, count: int) -> int:
        return sum(entry[0] for entry in self.free[:count])

    def take_cheapest(self, count: int) -> list[tuple[int, str, str]]:
        taken = self.free[:count]
        del self.free[:count]
        touched: dict[str, NodeFree] = {}
        for power_key, gpu, node_name in taken:
            node = self.nodes[node_name]
            del node.free[bisect_left(node.free, (power_key, gpu))]
            touched[node_name] = node
        for node in touched.values():
            self._touch(node)
        return taken

    def best_node(self, count: int) -> tuple[int, str] | None:
        """(sum of power keys, node) of the node whose `count` cheapest free GPUs cost least."""
        heap = self.heaps.get(count)
        while heap:
            total, name, version = heap[0]
            if self.nodes[name].version == version:
                return total, name
            heapq.heappop(heap)
        return None

    def take_from_node(self, name: str, count: int) -> list[tuple[int, str, str]]:
        node = self.nodes[name]
        taken = [(key, gpu, name) for key, gpu in node.free[:count]]
        del node.free[:count]
        for entry in taken:
            del self.free[bisect_left(self.free, entry)]
        self._touch(node)
        return taken

    def _touch(self, node: NodeFree) -> None:
        node.version += 1
        running = 0
        for size, (power_key, _gpu) in enumerate(node.free, start=1):
            running += power_key
            if size in self.sizes:
                heap = self.heaps.setdefault(size, [])
                heapq.heappush(heap, (running, node.name, node.version))
                if len(heap) > HEAP_SLACK * len(self.nodes) + HEAP_SLACK:
                    self._compact(heap)

    def _compact(self, heap: list[tuple[int, str, int]]) -> None:
        """Drop stale entries so heaps stay proportional to the node count."""
        heap[:] = [entry for entry in heap if self.nodes[entry[1]].version == entry[2]]
        heapq.heapify(heap)

    def take_exact(self, entries: list[tuple[int, str, str]]) -> None:
        """Take these free GPUs (restoring an earlier assignment)."""
        touched: dict[str, NodeFree] = {}
        for entry in entries:
            del self.free[bisect_left(self.free, entry)]
            node = self.nodes[entry[2]]
            del node.free[bisect_left(node.free, (entry[0], entry[1]))]
            touched[entry[2]] = node
        for node in touched.values():
            self._touch(node)

    def give_back(self, entries: list[tuple[int, str, str]]) -> None:
        self.add([FreeGpu(key, gpu, node) for key, gpu, node in entries])


@dataclass
class Choice:
    pool: Pool
    node: str | None  # None: the pool's cheapest GPUs, on any nodes
    cost: Decimal  # ranking only: the pool's cost of the set for the job (Pool.cost)

    def take(self, count: int) -> list[tuple[int, str, str]]:
        if self.node is None:
            return self.pool.take_cheapest(count)
        return self.pool.take_from_node(self.node, count)


def best_choice(pools: list[Pool], job: Job) -> Choice | None:
    """The cheapest pool (or node, for single-node jobs) with room for the job now."""
    best: Choice | None = None
    count = job.gpus
    for pool in pools:
        if len(pool.free) < count:
            continue
        if job.single_node and count > 1:
            found = pool.best_node(count)
            if found is None:
                continue
            total, node = found
        else:
            total, node = pool.cheapest_sum(count), None
        cost = pool.cost(job, total)
        if best is None or cost < best.cost:  # pools are visited in key order: ties stable
            best = Choice(pool, node, cost)
    return best


def ranked_choices(pools: list[Pool], job: Job) -> list[Choice]:
    """Every pool's best option for the job now, cheapest first (for randomised restarts)."""
    found = []
    for index, pool in enumerate(pools):
        choice = best_choice([pool], job)
        if choice is not None:
            found.append((choice.cost, index, choice))
    return [choice for _, _, choice in sorted(found, key=lambda item: item[:2])]
