"""Gauges read from the database when Prometheus scrapes: outbox depth and oldest age,
node trust and attestation age, telemetry by generation and node, cost by tenant. Read at
scrape time, not kept in a process, so every server process reports the same numbers and a
restart loses nothing. The dashboard's own queries (`webapp.dashboard.snapshot`) are reused
where they exist."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledger.money import MICRO_PER_UNIT
from ledger.units import MJ_PER_J, MS_PER_S, MW_PER_W
from webapp.attestation import health
from webapp.dashboard import snapshot
from webapp.fleet.models import GPU, Node, TelemetrySample
from webapp.outbox import selectors as outbox

# A GPU whose latest sample is older than this is left out of the node power sums: its
# reading no longer says what it draws now.
POWER_FRESH_S = 300


def _outbox() -> Iterator[Metric]:
    rows = GaugeMetricFamily(
        "wattlease_outbox_rows",
        "Outbox rows by status (pending + sending = depth)",
        labels=["status"],
    )
    for status, count in outbox.status_counts().items():
        rows.add_metric([status], count)
    yield rows
    oldest = outbox.oldest_in_flight()
    age = 0.0 if oldest is None else (timezone.now() - oldest).total_seconds()
    yield GaugeMetricFamily(
        "wattlease_outbox_oldest_unsent_age_seconds",
        "Age of the oldest outbox row not yet on the ledger (0 when none waits)",
        value=age,
    )


def _nodes() -> Iterator[Metric]:
    trust = GaugeMetricFamily("wattlease_nodes", "Nodes by trust state", labels=["trust"])
    counts = dict(Node.objects.values_list("trust").annotate(n=Count("id")).order_by())
    for state, _ in Node.TRUST_STATES:
        trust.add_metric([state], counts.get(state, 0))
    yield trust
    last = GaugeMetricFamily(
        "wattlease_node_last_good_attestation_timestamp_seconds",
        "Unix time of each active node's last valid quote",
        labels=["node"],
    )
    active = Node.objects.filter(status=Node.ACTIVE, last_good_attestation__isnull=False)
    for name, at in active.values_list("name", "last_good_attestation"):
        last.add_metric([name], at.timestamp())
    yield last
    why = GaugeMetricFamily(
        "wattlease_node_not_attested",
        "1 for each node that cannot be leased on now, labelled with why (the reason code its "
        "page shows: an agent's report such as tpm_lockout, the last quote's failure, stale)",
        labels=["node", "reason"],
    )
    for node in Node.objects.exclude(trust=Node.TRUSTED).exclude(status=Node.QUARANTINED):
        reason = health.why_not_attested(node)
        if reason is not None:
            why.add_metric([node.name, reason["code"]], 1)
    yield why


def _latest_samples() -> list[dict]:
    latest = TelemetrySample.objects.filter(gpu=OuterRef("pk")).order_by("-t_ms")
    return list(
        GPU.objects.annotate(
            t_ms=Subquery(latest.values("t_ms")[:1]),
            power_mw=Subquery(latest.values("power_mw")[:1]),
            energy_mj=Subquery(latest.values("energy_mj")[:1]),
        ).values(
            "node__name",
            "generation__catalogue_id",
            "generation__board_power_w",
            "t_ms",
            "power_mw",
            "energy_mj",
        )
    )


def _telemetry() -> Iterator[Metric]:
    util = GaugeMetricFamily(
        "wattlease_gpu_utilisation_ratio",
        "Mean share of time a kernel ran, per generation, over the dashboard window",
        labels=["generation"],
    )
    mem = GaugeMetricFamily(
        "wattlease_gpu_memory_bandwidth_utilisation_ratio",
        "Mean memory-bandwidth utilisation per generation over the dashboard window",
        labels=["generation"],
    )
    power = GaugeMetricFamily(
        "wattlease_gpu_power_watts",
        "Mean power of one GPU per generation over the dashboard window",
        labels=["generation"],
    )
    for row in snapshot.utilisation():
        util.add_metric([row["generation"]], row["util_gpu"])
        mem.add_metric([row["generation"]], row["util_mem_bw"])
        power.add_metric([row["generation"]], row["power_w"])
    yield from (util, mem, power)
    energy = CounterMetricFamily(
        "wattlease_gpu_energy_joules",
        "Energy drawn by the GPUs of each generation (sum of their NVML energy counters)",
        labels=["generation"],
    )
    node_power = GaugeMetricFamily(
        "wattlease_node_power_watts", "Power the node's GPUs draw now", labels=["node"]
    )
    board = GaugeMetricFamily(
        "wattlease_node_board_power_watts",
        "Sum of the board power (TDP) of the node's GPUs: the most they may draw",
        labels=["node"],
    )
    by_generation: dict[str, int] = {}
    drawn: dict[str, float] = {}
    limit: dict[str, Decimal] = {}
    fresh_ms = (timezone.now().timestamp() - POWER_FRESH_S) * MS_PER_S
    for row in _latest_samples():
        gen, node = row["generation__catalogue_id"], row["node__name"]
        limit[node] = limit.get(node, Decimal(0)) + row["generation__board_power_w"]
        if row["t_ms"] is None:
            continue
        by_generation[gen] = by_generation.get(gen, 0) + row["energy_mj"]
        if row["t_ms"] >= fresh_ms:
            drawn[node] = drawn.get(node, 0.0) + row["power_mw"] / MW_PER_W
    for gen, mj in sorted(by_generation.items()):
        energy.add_metric([gen], mj / MJ_PER_J)
    for node, watts in sorted(drawn.items()):
        node_power.add_metric([node], watts)
    for node, watts_limit in sorted(limit.items()):
        board.add_metric([node], float(watts_limit))
    yield from (energy, node_power, board)


def _cost() -> Iterator[Metric]:
    cost = GaugeMetricFamily(
        "wattlease_tenant_cost",
        "Cost of each tenant in currency units: its leases' up-front quotes ('priced') and "
        "its bill, the sum of its bill line totals ('billed')",
        labels=["tenant", "part"],
    )
    for row in snapshot.cost_by_tenant():
        cost.add_metric([row["tenant"], "priced"], row["priced_micro"] / MICRO_PER_UNIT)
        cost.add_metric([row["tenant"], "billed"], row["billed_micro"] / MICRO_PER_UNIT)
    yield cost


class DatabaseCollector(Collector):
    """Registered on the registry /metrics renders; each scrape runs a handful of queries."""

    def collect(self) -> Iterator[Metric]:
        yield from _outbox()
        yield from _nodes()
        yield from _telemetry()
        yield from _cost()
