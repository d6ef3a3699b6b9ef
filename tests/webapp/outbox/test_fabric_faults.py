"""Faults on a real Fabric network while the outbox relay streams leases to it: one
organisation's peer killed and restarted, then one orderer of three killed for good. Every
lease the app accepted is committed exactly once, none is lost, and the relay's retries
show in its log."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from decimal import Decimal

import pytest

from tests.fabric.network_fixture import start_network
from tests.webapp.fabric_app import app_on_fabric
from tests.webapp.helpers import place
from webapp.demo.governance import admin_clients
from webapp.demo.seed import gpu_uuid
from webapp.fleet.models import GPU
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

pytestmark = pytest.mark.fabric
ACTOR = "test"
LEASES = 20
DRAIN_TIMEOUT_S = 240


@pytest.fixture
def fleet(fleet):
    """conftest's fleet with two GPUs per lease of the stream, all registered on the ledger
    with the node: an ended lease keeps its GPUs until it is settled."""
    generation = fleet.gpus[0].generation
    fleet.gpus += [
        GPU.objects.create(
            uuid=gpu_uuid(fleet.node.name, i), node=fleet.node, index=i, generation=generation
        )
        for i in range(len(fleet.gpus), 2 * LEASES)
    ]
    return fleet


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """A network of this module's own: its nodes are killed here."""
    yield from start_network(tmp_path_factory.mktemp("fabric-faults"))


@pytest.fixture
def ledger(settings, network, monkeypatch):
    """Overrides the embedded `ledger` of tests/webapp/conftest.py: the app on Fabric."""
    with app_on_fabric(settings, network, monkeypatch) as client:
        yield client


@pytest.fixture
def ledger_admins(ledger, network):
    with admin_clients(network) as admins:
        yield admins


def inject_faults(network, log: list[str]) -> None:
    time.sleep(1.5)
    network.stop_node("peer0.org2", signal.SIGKILL)
    log.append("killed peer0.org2")
    time.sleep(3)
    network.start_node("peer0.org2")
    log.append("restarted peer0.org2")
    time.sleep(2)
    network.stop_node("orderer0", signal.SIGKILL)
    log.append("killed orderer0 (2 of 3 orderers left)")


def test_every_relayed_lease_commits_exactly_once_through_peer_and_orderer_faults(
    fleet, tenant, attested_node, ledger, network, caplog
):
    caplog.set_level(logging.WARNING, logger="webapp.outbox.relay")
    tenant.max_gpus = 2 * LEASES  # the operator's quota for this tenant: room for the stream
    tenant.save(update_fields=["max_gpus"])
    faults: list[str] = []
    injector = threading.Thread(target=inject_faults, args=(network, faults))
    injector.start()
    leases = []
    try:
        for i in range(LEASES):
            gpus = fleet.gpus[2 * i : 2 * i + 2]
            lease = actions.request_lease(
                tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
            )
            lease = place(lease, gpus, [attested_node])
            actions.activate_lease(lease, actor=ACTOR)
            actions.end_lease(lease, actor=ACTOR)
            leases.append(lease)
            relay_once(ledger)
            time.sleep(0.3)  # a stream, not a burst: the faults land in the middle of it
    finally:
        injector.join()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists():
        assert not OutboxEntry.objects.filter(status=OutboxEntry.REJECTED).exists(), list(
            OutboxEntry.objects.filter(status=OutboxEntry.REJECTED).values("function", "last_error")
        )
        assert time.monotonic() < deadline, list(
            OutboxEntry.objects.exclude(status=OutboxEntry.DONE).values(
                "function", "attempts", "last_error"
            )
        )
        relay_once(ledger)
        time.sleep(0.5)

    assert faults == [
        "killed peer0.org2",
        "restarted peer0.org2",
        "killed orderer0 (2 of 3 orderers left)",
    ]
    for lease in leases:
        lease_id = Lease.objects.get(pk=lease.pk).ledger_id
        key = json.dumps({"key": f"lease:{lease_id}"})
        history = json.loads(ledger.evaluate("GetHistory", key))
        statuses = [version["value"]["status"] for version in history]
        assert statuses.count("ACTIVE") == 1 and statuses.count("ENDED") == 1, (lease_id, history)
    retries = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "retry in" in r.getMessage()
    ]
    assert retries, "the faults caused no retry: they did not land during the stream"
    assert OutboxEntry.objects.filter(attempts__gt=1).exists()
    print(f"{len(retries)} retries, e.g. {retries[0]}")
